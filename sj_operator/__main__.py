"""`python -m sj_operator`: run the operator against $KUBECONFIG (or in-cluster)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

import kopf

from sj_operator.config import ConfigError, OperatorConfig, parse_config
from sj_operator.pacing import tune_gc


def operator_coroutine(config: OperatorConfig, *, stop_flag: asyncio.Event | threading.Event | None = None,
                       ready_flag: asyncio.Event | threading.Event | None = None,
                       registry: kopf.OperatorRegistry | None = None) -> Coroutine[Any, Any, None]:
    """The operator as a coroutine (what tests run in a thread of their own)."""
    import sj_operator.handlers  # noqa: F401  (registers the handlers)

    return kopf.operator(
        clusterwide=True,
        standalone=True,  # one active replica is elected by a Lease, not kopf peering
        memo=kopf.Memo(config=config),
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        registry=registry,
        liveness_endpoint=f"http://0.0.0.0:{config.liveness_port}/healthz" if config.liveness_port else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"sj_operator: invalid configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if config.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    logging.getLogger("kopf").setLevel(logging.INFO if config.verbose else logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # probes every few seconds
    tune_gc()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(operator_coroutine(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
