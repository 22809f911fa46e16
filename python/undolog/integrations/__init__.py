"""Framework adapters: ``@undolog_tool`` tools as OpenAI Agents, LangChain/LangGraph and
pydantic-ai tools, each behind its own optional extra (``openai-agents``, ``langgraph``,
``pydantic-ai``). The binding never imports these modules; they import the binding.

What every adapter shares lives in :mod:`undolog.integrations._core`: how a framework's
tool call maps to a journal step, how an IRREVERSIBLE call asks the framework for a
human, and how a decision is recorded in UndoLog by a login other than the agent's.
"""
