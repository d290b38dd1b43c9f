# The Debian mirror to debootstrap from, sourced by scripts/rabbitmq-roots.sh and scripts/container-image.sh: the one
# this machine's APT already uses, so that a build fetches from where the machine is allowed to, and no mirror's name
# is written here. ACKSCOPE_DEBIAN_MIRROR overrides it.
#
# debian_mirror WHO [APT_DIR]   prints the mirror's URL; without one, prints one line on stderr (starting "WHO: ")
#                               saying to set ACKSCOPE_DEBIAN_MIRROR, and returns 1. APT_DIR: /etc/apt by default.
#
# Read as APT reads them, in its order: APT_DIR/sources.list, then APT_DIR/sources.list.d/*.list (one-line format)
# and *.sources (deb822, stanzas with Enabled: no skipped), sorted by name. The mirror is the first "deb" entry of
# Debian's main archive: a bare suite (bookworm, trixie, sid, stable: not bookworm-security or bookworm-updates, which
# debootstrap cannot start from), the main component, a URI debootstrap fetches (http, https, file; not cdrom: or
# mirror+file:). Entries signed by a keyring of their own (Signed-By, signed-by= other than Debian's archive keyring)
# are another vendor's repository, never taken; of the rest, one signed by Debian's archive keyring comes first.
debian_mirror() {
  local who=$1 apt=${2:-/etc/apt}
  if [ -n "${ACKSCOPE_DEBIAN_MIRROR:-}" ]; then
    echo "${ACKSCOPE_DEBIAN_MIRROR%/}"
    return 0
  fi
  local files=() f found
  if [ -f "$apt/sources.list" ]; then files+=("$apt/sources.list"); fi
  for f in "$apt"/sources.list.d/*; do  # one list sorted by name, whatever the format, as APT reads them
    case $f in *.list | *.sources) if [ -f "$f" ]; then files+=("$f"); fi ;; esac
  done
  if [ ${#files[@]} -gt 0 ]; then
    # Each entry made one line, "URI<TAB>SUITE<TAB>COMPONENTS<TAB>SIGNED-BY", in APT's order; then the choice, the
    # stable sort keeping that order within each rank.
    found=$(printf '%s\n' "${files[@]}" | _debian_mirror_entries | awk -F'\t' '
      $1 !~ /^(https?|file):/ || $2 ~ /[-\/]/ || (" " $3 " ") !~ / main / { next }
      $4 != "" && $4 !~ /debian-archive-keyring/ { next }
      { print ($4 ~ /debian-archive-keyring/ ? 0 : 1) "\t" $1 }' | sort -s -n -k1,1 | awk -F'\t' 'NR == 1 { print $2 }')
  fi
  if [ -z "${found:-}" ]; then
    echo "$who: no Debian mirror in APT's sources ($apt/sources.list, $apt/sources.list.d/*.list and *.sources): set" \
      "ACKSCOPE_DEBIAN_MIRROR to the URL of the Debian mirror to use" >&2
    return 1
  fi
  echo "${found%/}"
}

# The entries of the sources files named on standard input, in that order, one line each:
# URI<TAB>SUITE<TAB>COMPONENTS<TAB>SIGNED-BY, one line per URI and suite.
_debian_mirror_entries() {
  local f
  while IFS= read -r f; do
    case $f in
      *.sources) awk '
        function flush(   i, j, nu, ns, u, s) {
          if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
            nu = split(uris, u, " "); ns = split(suites, s, " ")
            for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i] "\t" s[j] "\t" comps "\t" signed
          }
          types = uris = suites = comps = signed = enabled = ""; field = ""
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (field == "signed-by" && signed == "") signed = "inline key"; next }  # a continuation line
        {
          field = tolower(substr($0, 1, index($0, ":") - 1)); value = substr($0, index($0, ":") + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", value); gsub(/[ \t]+/, " ", value)
          if (field == "types") types = value; else if (field == "uris") uris = value
          else if (field == "suites") suites = value; else if (field == "components") comps = value
          else if (field == "signed-by") signed = value; else if (field == "enabled") enabled = value
        }
        END { flush() }' "$f" ;;
      *) awk '
        { sub(/#.*/, ""); sub(/^[ \t]+/, "") }
        $1 != "deb" { next }
        {
          line = $0; signed = ""
          if (match(line, /\[[^]]*\]/)) {
            options = substr(line, RSTART + 1, RLENGTH - 2)
            line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH)
            if (match(options, /signed-by=[^ \t]+/)) signed = substr(options, RSTART + 10, RLENGTH - 10)
          }
          n = split(line, w, /[ \t]+/); comps = ""
          for (i = 4; i <= n; i++) if (w[i] != "") comps = comps (comps == "" ? "" : " ") w[i]
          if (n >= 3) print w[2] "\t" w[3] "\t" comps "\t" signed
        }' "$f" ;;
    esac
  done
}
