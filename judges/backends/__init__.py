"""Judge backends: OpenAI-compatible HTTP (vLLM, TGI, hosted APIs; one server, a fleet of them, or the
OpenAI Batch API), local transformers, replay, and a
stub (no model: a stated rule, for dry runs; never a real judge).

Every backend turns one :class:`~honestci.judges.backends.base.JudgeRequest` into a
:class:`~honestci.judges.backends.base.Completion`; heavy libraries (httpx, torch) are imported only by the
backend that needs them.
"""

from honestci.judges.backends.base import Backend, BackendFatalError, Completion, JudgeRequest

__all__ = ["Backend", "BackendFatalError", "Completion", "JudgeRequest"]
