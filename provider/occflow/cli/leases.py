"""``occflow leases list|release|reclaim``: look at and clean up the lease store."""

from __future__ import annotations

import argparse
import json

from ..leases import LeaseStore, resolve_store_url


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("leases", help="list or release admission leases")
    p.add_argument("--store", metavar="URL", help="lease store URL (default: the workers' store: "
                   "$OCCFLOW_LEASE_STORE_URL, else the Airflow connection $OCCFLOW_LEASE_STORE_CONN_ID, "
                   "else sqlite:///$AIRFLOW_HOME/occflow_leases.db)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    ls = verbs.add_parser("list", help="live leases and waiting requests")
    ls.add_argument("--table", help="only this table")
    ls.add_argument("--all", action="store_true", help="include expired leases not yet reclaimed")
    ls.add_argument("--format", choices=["table", "json"], default="table")
    ls.set_defaults(func=_list)

    rel = verbs.add_parser("release", help="release leases by id (idempotent)")
    rel.add_argument("lease_ids", nargs="+", metavar="LEASE_ID")
    rel.set_defaults(func=_release)

    rec = verbs.add_parser("reclaim", help="reclaim expired leases and stale queue places now")
    rec.set_defaults(func=_reclaim)


def _store(args: argparse.Namespace) -> LeaseStore:
    # A missing SQLite file is a typo or the wrong AIRFLOW_HOME, not an empty store to create.
    return LeaseStore.from_url(resolve_store_url(args.store), existing=True)


def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    leases = store.leases(args.table, include_expired=args.all)
    waiting = store.waiting(args.table)
    if args.format == "json":
        print(json.dumps({
            "leases": [
                {"lease_id": le.lease_id, "table": le.table,
                 "partitions": None if le.partitions is None else sorted(le.partitions),
                 "operation": le.operation.value, "profile": le.profile, "holder": le.holder.describe(),
                 "acquired": le.acquired.isoformat(), "expires": le.expires.isoformat()}
                for le in leases
            ],
            "waiting": [
                {"request_id": w["request_id"], "table": w["table"],
                 "partitions": None if w["partitions"] is None else sorted(w["partitions"]),
                 "operation": w["operation"], "profile": w["profile"], "holder": w["holder"].describe(),
                 "enqueued": w["enqueued"].isoformat()}
                for w in waiting
            ],
        }, indent=2))
        return 0
    print(f"{len(leases)} lease(s)")
    for le in leases:
        print(f"  {le.lease_id}  {le.describe()}  expires {le.expires.to_iso8601_string()}")
    print(f"{len(waiting)} waiting request(s), in serving order")
    for w in waiting:
        where = "whole table" if w["partitions"] is None else ", ".join(sorted(w["partitions"]))
        print(f"  {w['request_id']}  {w['operation']} on {w['table']} [{where}] by {w['holder'].describe()}"
              f"  since {w['enqueued'].to_iso8601_string()}")
    return 0


def _release(args: argparse.Namespace) -> int:
    store = _store(args)
    for lease_id in args.lease_ids:
        released = store.release(lease_id)
        print(f"{lease_id}: {'released' if released else 'not held (already released or reclaimed)'}")
    return 0


def _reclaim(args: argparse.Namespace) -> int:
    print(f"reclaimed {_store(args).reclaim_expired()} expired lease(s)")
    return 0
