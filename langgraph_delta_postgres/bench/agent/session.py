"""The deepagents session of the agent section: the agent on a saver with its scripted
model, the scales (turns, context window), the user turns, and the normalization of
generated ids and timestamps for comparing states."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig


@dataclass(frozen=True)
class AgentScale:
    turns: int
    max_input_tokens: int  # the scripted model's context window: summarization's trigger
    rounds: int
    history_rounds: int


SCALES = {
    "full": AgentScale(150, 20_000, 7, 3),
    "quick": AgentScale(30, 8_000, 3, 3),
    "tiny": AgentScale(6, 4_000, 2, 2),
}



def available() -> bool:
    """Whether the optional ``agent`` extra (deepagents) is installed."""
    try:
        import deepagents  # noqa: F401
    except ImportError:
        return False
    return True


def _cfg(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def build_agent(checkpointer: Any, max_input_tokens: int) -> tuple[Any, Any]:
    """The deep agent on ``checkpointer`` and its scripted model."""
    from deepagents import create_deep_agent

    from ..scripted_model import ScriptedChatModel

    model = ScriptedChatModel(profile={"max_input_tokens": max_input_tokens})
    return create_deep_agent(model=model, checkpointer=checkpointer), model


def session_graphs(savers: dict[str, Any], turns: int) -> dict[str, Any]:
    """For the side-by-side scripts: the agent on each saver (full scale's context
    window), after ``turns`` turns of the session on thread ``agent-<name>``, the savers
    taking turns."""
    tokens = SCALES["full"].max_input_tokens
    graphs = {k: build_agent(s, tokens)[0] for k, s in savers.items()}
    for i in range(turns):
        for k, g in graphs.items():
            g.invoke(_turn_inputs(i), _cfg(f"agent-{k}"))
    return graphs


_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?")


def normalized(v: Any) -> Any:
    """``v`` with generated ids and timestamps replaced by placeholders."""
    from langchain_core.messages import BaseMessage

    if isinstance(v, BaseMessage):
        return (type(v).__name__, normalized(v.model_dump()))
    if isinstance(v, dict):
        return {normalized(k): normalized(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [normalized(x) for x in v]
    if isinstance(v, str):
        return _TS.sub("<ts>", _UUID.sub("<id>", v))
    return v


def _turn_inputs(i: int) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from ..scripted_model import user_text

    return {"messages": [HumanMessage(user_text(i), id=f"user-{i}")]}
