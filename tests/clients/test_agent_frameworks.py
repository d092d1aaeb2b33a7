"""Agent frameworks through hasten on the Responses API, translated and passed through: the
OpenAI Agents SDK with its defaults (tracing off) running one function tool, and LangChain's
``ChatOpenAI(use_responses_api=True)``: invoke, stream and a bound tool's round trip."""

from __future__ import annotations

from typing import Any

import agents
import openai
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.support.gateway import sim_stats
from tests.support.servers import ServerThread

# Routed by the gateway's catch-all model, as `model="local"` would be to the local engine.
MODEL = "sim-model"


async def test_the_agents_sdk_runs_a_function_tool_and_answers(gateway: ServerThread) -> None:
    agents.set_tracing_disabled(True)
    cities: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return f"sunny in {city}"

    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)
    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    agent = agents.Agent(
        name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model
    )
    result = await agents.Runner.run(agent, "What is the weather in Oslo?", max_turns=4)
    assert len(cities) == 1 and cities[0]  # the model called the tool once, with a city
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert isinstance(result.final_output, str) and result.final_output
    assert len(result.raw_responses) == 2
    assert all(r.response_id and r.response_id.startswith("resp_") for r in result.raw_responses)
    await client.close()


async def test_the_agents_sdk_streamed_run_parses_every_event(gateway: ServerThread) -> None:
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def lookup(term: str) -> str:
        """Looks a term up."""
        return f"{term}: found"

    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)
    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    agent = agents.Agent(name="lookup", instructions="Use the tool.", tools=[lookup], model=model)
    run = agents.Runner.run_streamed(agent, "Look up hasten", max_turns=4)
    raw_kinds: list[str] = []
    async for event in run.stream_events():
        if event.type == "raw_response_event":
            raw_kinds.append(event.data.type)
    assert raw_kinds.count("response.completed") == 2
    assert "response.function_call_arguments.delta" in raw_kinds
    assert isinstance(run.final_output, str) and run.final_output
    await client.close()


async def test_a_repeated_agent_run_is_served_from_the_cache(
    sim: ServerThread, any_sampling_gateway: ServerThread
) -> None:
    """The Agents SDK sends no temperature: under ``deterministic_only = false`` a second
    identical run (tool call, tool output, answer) reaches the upstream not once."""
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        return "12:00"

    client = openai.AsyncOpenAI(
        base_url=any_sampling_gateway.url + "/v1", api_key="sk-test", max_retries=0
    )
    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    agent = agents.Agent(name="clock", instructions="Tell the time.", tools=[get_time], model=model)
    before = sim_stats(sim.url)["num_requests"]
    first = await agents.Runner.run(agent, "What time is it in Lima?", max_turns=4)
    middle = sim_stats(sim.url)["num_requests"]
    second = await agents.Runner.run(agent, "What time is it in Lima?", max_turns=4)
    assert middle - before == 2 and sim_stats(sim.url)["num_requests"] == middle
    assert second.final_output == first.final_output
    first_ids = {r.response_id for r in first.raw_responses}
    assert not first_ids & {r.response_id for r in second.raw_responses}  # fresh ids
    await client.close()


def _chat(gateway: ServerThread) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=gateway.url + "/v1",
        api_key="sk-test",  # type: ignore[arg-type]
        use_responses_api=True,
        temperature=0,
        max_retries=0,
    )


def test_langchain_invoke_and_stream_give_the_same_answer(gateway: ServerThread) -> None:
    chat = _chat(gateway)
    whole = chat.invoke("The capital of Italy?")
    assert isinstance(whole, AIMessage) and whole.text
    assert whole.response_metadata["id"].startswith("resp_")
    chunks = list(chat.stream("The capital of Italy?"))
    assert chunks and all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    merged: Any = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert merged.text == whole.text
    assert merged.usage_metadata is not None and merged.usage_metadata["output_tokens"] > 0


def test_langchain_bind_tools_round_trip(gateway: ServerThread) -> None:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    chat = _chat(gateway).bind_tools([get_weather])
    question = HumanMessage("What is the weather in Quito?")
    asked = chat.invoke([question])
    assert isinstance(asked, AIMessage)
    (call,) = asked.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"]
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage)
    answered = chat.invoke([question, asked, result])
    assert isinstance(answered, AIMessage) and answered.text and not answered.tool_calls
