#!/usr/bin/env bash
# Run by scripts/container-image.sh on the host, on pyarrow's wheel before the image installs it: what no ackscope
# command loads, left out, and the libraries stripped of their symbols (the image has no strip).
#   slim-pyarrow.sh PYTHON WHEEL      (PYTHON has the `wheel` package; the wheel is replaced)
set -euo pipefail
python=$1 wheel=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m wheel unpack --dest "$work" "$wheel"
tree=$(echo "$work"/pyarrow-*)
arrow=$tree/pyarrow
# Flight (its RPC), the cloud and Hadoop file systems, ORC, the C++ headers, Cython sources and tests. What stays
# reads and writes Parquet, with the dataset layer and the Substrait and Acero libraries its core links.
rm -rf "$arrow/include" "$arrow/src" "$arrow/tests"
rm -f "$arrow"/libarrow_flight.so* "$arrow"/libarrow_python_flight.so* "$arrow"/_flight.*.so "$arrow/flight.py" \
      "$arrow"/libarrow_s3.so* "$arrow"/_s3fs.*.so "$arrow"/_gcsfs.*.so "$arrow"/_azurefs.*.so "$arrow"/_hdfs.*.so \
      "$arrow"/_orc.*.so "$arrow"/_dataset_orc.*.so "$arrow"/_pyarrow_cpp_tests.*.so \
      "$arrow"/*.pyx "$arrow"/*.pxd "$arrow"/*.pxi
# A wheel holds no symbolic links: its libraries' link-time name (lib*.so) and full version (lib*.so.N.x.y) are
# copies of the name the loader asks for (lib*.so.N, their SONAME). Only that one is loaded.
for lib in "$arrow"/lib*.so.*.*.*; do
  [ -e "$lib" ] && rm -f "$lib" "${lib%.so.*}.so"
done
strip --strip-unneeded "$arrow"/*.so*
rm "$wheel"
"$python" -m wheel pack --dest-dir "$(dirname "$wheel")" "$tree" >/dev/null
