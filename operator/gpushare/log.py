"""structlog setup shared by the gpushare processes (agent, operator, CLI).

``configure_logging("json")`` for machines (one JSON object per line, the default in a pod),
``configure_logging("console")`` for people. Standard-library ``logging`` records (from
kopf, aiohttp, ...) go through the same renderer.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

LogFormat = Literal["json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")


def configure_logging(fmt: LogFormat = "json", level: int | str = logging.INFO) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            # First: a call below the level (the reconciler's per-node debug lines) stops here,
            # before the time stamp and the rest (about 20 µs each otherwise).
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([structlog.processors.format_exc_info] if fmt == "json" else []),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
