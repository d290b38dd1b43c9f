"""The broker's own consumers and publishers, read beside the lists both sources read: its shovels (their state,
ack mode, endpoints and counts) and federation links. Their plugins keep their status outside the management
statistics, so they answer with statistics off as well. A plugin that is not enabled answers 404: nothing of it
runs here, which is no error. A part that fails costs only itself: the rules that need it say "not evaluated"."""

from __future__ import annotations

import time
from concurrent.futures import Executor, wait
from dataclasses import replace

from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, as_fetch_error

from ..selection import Selection
from . import shovels as normalise
from .client import ManagementClient

MISSED_WITHOUT = {"shovels": frozenset({facts.SHOVELS, facts.SHOVEL_STATES}), "federation-links": frozenset({facts.FEDERATION_LINKS})}
PATHS = {"shovels": "/api/shovels", "shovel-definitions": "/api/parameters/shovel",
         "federation-links": "/api/federation-links"}
# Where rabbitmq_shovel runs without rabbitmq_shovel_management, its definitions are listed and its state is not.
NO_SHOVEL_STATUS = ("the shovel plugin's management (rabbitmq_shovel_management) is not enabled: the shovels are "
                    "known by their definitions, not their state")


def read(s: Snapshot, client: ManagementClient, deadline: float, pool: Executor, selection: Selection
         ) -> tuple[Snapshot, list[FetchError]]:
    """`s` with its shovels and federation links, and what could not be read; bounded by `deadline`."""
    futures = {pool.submit(client.http.json, part, path, {}, deadline): part for part, path in PATHS.items()}
    done, _ = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
    got, absent, failed = {}, set(), {}
    for future, part in futures.items():
        if future not in done:
            failed[part] = FetchError(part, "deadline", "no complete answer within the poll deadline")
        elif future.exception() is None:
            got[part] = future.result()
        elif getattr(future.exception(), "status", None) == 404:
            absent.add(part)  # the plugin is not enabled: none of these here
        else:
            failed[part] = as_fetch_error(part, future.exception())
    notes, unreported = list(s.notes), set(s.unreported)
    shovels, links = (), ()
    try:
        defined = normalise.definitions(got["shovel-definitions"]) if "shovel-definitions" in got else None
        if "shovels" in got:
            shovels = normalise.shovels(got["shovels"], defined)
        elif "shovels" in absent and defined:
            shovels = normalise.shovels(None, defined)
            notes.append(NO_SHOVEL_STATUS)
            unreported.add(facts.SHOVEL_STATES)
    except normalise.MalformedTransfers as e:
        failed["shovels"] = FetchError("shovels", "malformed", str(e))
    # Without its definition a dynamic shovel's ack mode is unknown: the shovels are read, not judged.
    if "shovel-definitions" in failed:
        e = failed.pop("shovel-definitions")
        failed.setdefault("shovels", FetchError("shovels", e.reason, f"{PATHS['shovel-definitions']}: "
                                                + str(e).split(": ", 1)[-1], e.status))
    else:
        failed.pop("shovel-definitions", None)
    try:
        if "federation-links" in got:
            links = normalise.federation_links(got["federation-links"])
    except normalise.MalformedTransfers as e:
        failed["federation-links"] = FetchError("federation-links", "malformed", str(e))
    out = replace(s, notes=tuple(notes), unreported=frozenset(unreported),
                  shovels=() if "shovels" in failed else tuple(
                      v for v in shovels if v.vhost is None or selection.vhost(v.vhost)),
                  federation_links=() if "federation-links" in failed else tuple(
                      k for k in links if selection.vhost(k.vhost)))
    return out, sorted(failed.values(), key=lambda e: e.endpoint)
