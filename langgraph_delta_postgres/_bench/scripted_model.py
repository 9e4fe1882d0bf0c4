"""A scripted chat model for the agent benchmark: deterministic, no network.

It plays a coding session as a real model would through ``deepagents``' tools: each
user turn ``"turn N: ..."`` is answered with a fixed sequence of tool calls
(``write_file``, ``read_file``, ``edit_file``, ``ls``, ``write_todos``, ``task`` for a
subagent) and a final answer. Where it stands is read from the conversation itself,
never from a counter in the model, so every saver's thread sees the same answers
whatever the order the turns run in: the last message is the user's turn (step 0), or
a tool result whose ``tool_call_id`` (``tN-sK-...``) names the step that called it.
A subagent's task description starts with ``"subtask N:"``. The summarization
middleware's own call (its prompt starts with the "Context Extraction Assistant"
role) gets a fixed summary.

``profile={"max_input_tokens": ...}`` is what makes deepagents' summarization
trigger early: with a profile, its defaults are fractions of that window (summarize at
85 %, keep 10 %).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

SUMMARY_MARKER = "Context Extraction Assistant"
_TURN = re.compile(r"^turn (\d+):")
_SUBTASK = re.compile(r"^subtask (\d+):")
_CALL = re.compile(r"^(t|st)(\d+)-s(\d+)")

Call = tuple[str, dict[str, Any]]


def module_source(turn: int, lines: int = 40) -> str:
    """A file's text as an agent writes it: ~1.5 KB of code that differs per turn."""
    body = [f"# module {turn % 12}, written at turn {turn}",
            "from __future__ import annotations", ""]
    for j in range(lines):
        body.append(f"def f_{turn}_{j}(x: int) -> int:\n    return x * {j} + {turn}  # step {j}")
    return "\n".join(body) + "\n"


def path_of(turn: int) -> str:
    return f"/src/mod_{turn % 12}.py"


def turn_plan(turn: int) -> list[list[Call]]:
    """The tool-call steps of one user turn (each step: the calls of one AI message);
    the final answer follows the last step."""
    p = path_of(turn)
    kind = turn % 6
    if turn % 10 == 3:  # a subagent does part of the work
        return [[("task", {"description": f"subtask {turn}: review {p} and write notes",
                           "subagent_type": "general-purpose"})]]
    if kind == 0:
        return [
            [("write_todos", {"todos": [
                {"content": f"write {p}", "status": "in_progress"},
                {"content": f"check {p}", "status": "pending"},
            ]})],
            [("write_file", {"file_path": p.replace(".py", f"_{turn}.py"),
                             "content": module_source(turn)})],
        ]
    if kind == 1:
        return [[("ls", {"path": "/src"})],
                [("read_file", {"file_path": path_of(turn - 1).replace(".py", f"_{turn - 1}.py")
                                if (turn - 1) % 6 == 0 else "/src/README.md",
                                "limit": 40})]]
    if kind == 2:
        return [[("write_file", {"file_path": f"/src/pkg_{turn}.py",
                                 "content": module_source(turn, 25)})],
                [("edit_file", {"file_path": f"/src/pkg_{turn}.py",
                                "old_string": f"# module {turn % 12}, written at turn {turn}",
                                "new_string": f"# module {turn % 12}, edited at turn {turn}"})]]
    if kind == 3:
        return [[("read_file", {"file_path": f"/src/pkg_{turn - 1}.py", "limit": 60}),
                 ("ls", {"path": "/"})]]
    if kind == 4:
        return [[("write_file", {"file_path": f"/docs/notes_{turn}.md",
                                 "content": f"Notes of turn {turn}.\n" + "- item\n" * 60})]]
    return []  # kind 5: a plain answer


def subtask_plan(turn: int) -> list[list[Call]]:
    return [[("ls", {"path": "/src"})],
            [("write_file", {"file_path": f"/notes/review_{turn}.md",
                             "content": f"Review of turn {turn}.\n" + "ok line\n" * 40})]]


def answer_text(turn: int, sub: bool = False) -> str:
    who = "Subagent report" if sub else "Done"
    return f"{who} for turn {turn}: " + " ".join(f"detail-{turn}-{k}" for k in range(60))


def user_text(turn: int) -> str:
    return f"turn {turn}: please continue the refactor, " + " ".join(
        f"requirement-{turn}-{k}" for k in range(30)
    )


def _text(m: BaseMessage) -> str:
    c = m.content
    if isinstance(c, str):
        return c
    return " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in c)


class ScriptedChatModel(BaseChatModel):
    """See the module docstring. ``calls`` counts model calls by kind (main / subagent /
    summary), to check in the bench that subagents and summarization really ran."""

    calls: dict[str, int] = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        return self  # the script names the tools itself

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        msg = self._next(messages)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _count(self, kind: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage) and SUMMARY_MARKER in _text(last):
            self._count("summary")
            n = _text(last).count("turn ")
            return AIMessage(content=f"Summary of the session so far ({n} turn mentions): "
                             "files under /src were written, edited and reviewed.",
                             id=f"summary-{len(_text(last))}")
        if isinstance(last, ToolMessage):
            m = _CALL.match(last.tool_call_id or "")
            if not m:
                raise ValueError(f"scripted model: unknown tool call id {last.tool_call_id!r}")
            sub, turn, step = m.group(1) == "st", int(m.group(2)), int(m.group(3)) + 1
        else:
            text = _text(last)
            if (mt := _TURN.match(text)) is not None:
                sub, turn, step = False, int(mt.group(1)), 0
            elif (ms := _SUBTASK.match(text)) is not None:
                sub, turn, step = True, int(ms.group(1)), 0
            else:
                raise ValueError(f"scripted model: no script for {text[:80]!r}")
        self._count("subagent" if sub else "main")
        plan: Callable[[int], list[list[Call]]] = subtask_plan if sub else turn_plan
        steps = plan(turn)
        prefix = f"{'st' if sub else 't'}{turn}-s{step}"
        if step >= len(steps):
            return AIMessage(content=answer_text(turn, sub), id=f"ai-{prefix}-final")
        calls = [
            {"name": name, "args": args, "id": f"{prefix}-{k}", "type": "tool_call"}
            for k, (name, args) in enumerate(steps[step])
        ]
        return AIMessage(content="", tool_calls=calls, id=f"ai-{prefix}")
