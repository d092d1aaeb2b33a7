"""The Responses API's state through the gateway, with the openai SDK: a follow-up sent the
moment an answer is in finds it (stream and not, translated for a chat-only upstream and
passed through to one that speaks Responses), retrieve, delete, input_items, store false,
tenants, background mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from hasten.config import CacheConfig, GatewayConfig
from hasten.config.cache_policy import ModelCachePolicy
from hasten.config.fleet import FleetConfig
from hasten.config.responses import ResponsesConfig
from hasten.config.tables import CLIENT_APIS
from hasten.simulator import SimConfig, build_app
from tests.support.gateway import BodyRecorder, make_config, running_gateway, sim_stats
from tests.support.servers import ServerThread

MEMORY_CACHE = CacheConfig(backend="memory")
KEYS = (("team-a", "sk-team-a"), ("team-b", "sk-team-b"))
AUTH = {"authorization": "Bearer sk-test"}  # the tenant the SDK's calls are in
MODES = pytest.mark.parametrize("apis", [(), CLIENT_APIS], ids=["translated", "native"])


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0))) as server:
        yield server


def _config(
    sim_url: str, *, apis: tuple[str, ...] = (), keys: tuple[tuple[str, str], ...] = ()
) -> GatewayConfig:
    config = make_config({"sim": sim_url + "/v1"}, cache=MEMORY_CACHE, apis=apis, api_keys=keys)
    routes = {
        name: replace(route, cache=ModelCachePolicy(is_deterministic_only=False))
        for name, route in config.models.items()
    }
    return replace(config, models=routes)


def _client(gateway: ServerThread, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def _user_texts(items: object) -> list[str]:
    texts: list[str] = []
    for item in items:  # type: ignore[attr-defined]
        if getattr(item, "type", None) == "message" and getattr(item, "role", None) == "user":
            texts.extend(part.text for part in item.content if part.type == "input_text")
    return texts


@MODES
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_follow_up_sent_at_once_continues_the_conversation(
    sim: ServerThread, apis: tuple[str, ...], backend: str, tmp_path: Path
) -> None:
    config = _config(sim.url, apis=apis)
    if backend == "sqlite":  # written on its own thread: still before the answer's end
        config = replace(config, responses=ResponsesConfig(path=str(tmp_path / "r.sqlite3")))
    with running_gateway(config) as gateway:
        client = _client(gateway)
        first = client.responses.create(
            model="sim-model", input="Remember the word walnut.", temperature=0
        )
        # Sent the moment the answer is in: the record was written before its end went out.
        second = client.responses.create(
            model="sim-model", input="Which word?", previous_response_id=first.id
        )
        assert second.status == "completed" and second.output_text
        with client.responses.stream(
            model="sim-model", input="And again?", previous_response_id=second.id
        ) as stream:
            for _ in stream:
                pass
            third = stream.get_final_response()
        fourth = client.responses.create(
            model="sim-model", input="Once more.", previous_response_id=third.id
        )
        listed = client.responses.input_items.list(fourth.id, order="asc", limit=100)
        # The whole conversation, oldest first: every user turn, and each answer between.
        assert _user_texts(listed.data) == [
            "Remember the word walnut.",
            "Which word?",
            "And again?",
            "Once more.",
        ]
        answers = [item for item in listed.data if getattr(item, "role", None) == "assistant"]
        assert len(answers) == 3
        assert not listed.has_more
        raw = client.responses.input_items.with_raw_response.list(fourth.id, order="asc")
        shape = raw.http_response.json()
        assert shape["object"] == "list" and shape["first_id"] == listed.data[0].id
        assert shape["last_id"] == shape["data"][-1]["id"]


@MODES
def test_the_expanded_history_reaches_the_upstream(
    sim: ServerThread, apis: tuple[str, ...]
) -> None:
    """The same conversation sent whole gets the same cache entry as its chained form (the
    key covers the expanded history), whether the chained form reached the upstream
    expanded (translated) or as the id the upstream holds (native)."""
    with running_gateway(_config(sim.url, apis=apis)) as gateway:
        client = _client(gateway)
        first_raw = client.responses.with_raw_response.create(
            model="sim-model", input="Name a colour.", temperature=0
        )
        first = first_raw.parse()
        chained = client.responses.with_raw_response.create(
            model="sim-model", input="Another.", previous_response_id=first.id, temperature=0
        )
        assert chained.headers["x-hasten-cache"] == "miss"
        whole = [
            {"type": "message", "role": "user", "content": "Name a colour."},
            *first_raw.http_response.json()["output"],  # as the client got them
            {"type": "message", "role": "user", "content": "Another."},
        ]
        sent_whole = client.responses.with_raw_response.create(
            model="sim-model", input=whole, temperature=0
        )
        assert sent_whole.headers["x-hasten-cache"] == "hit"
        assert sent_whole.parse().output_text == chained.parse().output_text


@MODES
def test_retrieve_delete_and_a_404_after(sim: ServerThread, apis: tuple[str, ...]) -> None:
    with running_gateway(_config(sim.url, apis=apis)) as gateway:
        client = _client(gateway)
        with client.responses.stream(model="sim-model", input="Keep me.") as stream:
            for _ in stream:
                pass
            created = stream.get_final_response()
        fetched = client.responses.retrieve(created.id)
        assert fetched.id == created.id and fetched.output_text == created.output_text
        answer = httpx.delete(f"{gateway.url}/v1/responses/{created.id}", headers=AUTH)
        assert answer.json() == {"id": created.id, "object": "response", "deleted": True}
        with pytest.raises(openai.NotFoundError) as gone:
            client.responses.retrieve(created.id)
        assert gone.value.body["message"] == f"Response with id '{created.id}' not found."  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError) as follow_up:
            client.responses.create(
                model="sim-model", input="Still there?", previous_response_id=created.id
            )
        error = follow_up.value.body
        assert error["param"] == "previous_response_id"  # type: ignore[index]
        assert error["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_cache_hit_is_stored_under_its_fresh_id(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        client = _client(gateway)
        first = client.responses.create(model="sim-model", input="Hit me.", temperature=0)
        raw = client.responses.with_raw_response.create(
            model="sim-model", input="Hit me.", temperature=0
        )
        assert raw.headers["x-hasten-cache"] == "hit"
        again = raw.parse()
        assert again.id != first.id
        assert client.responses.retrieve(again.id).output_text == first.output_text
        follow = client.responses.create(
            model="sim-model", input="Next.", previous_response_id=again.id
        )
        assert follow.status == "completed"


def test_store_false_keeps_nothing(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        client = _client(gateway)
        unstored = client.responses.create(model="sim-model", input="Forget me.", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.create(
                model="sim-model", input="And?", previous_response_id=unstored.id
            )


def test_another_tenants_response_is_a_404(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url, keys=KEYS)) as gateway:
        mine = _client(gateway, "sk-team-a").responses.create(model="sim-model", input="Mine.")
        theirs = _client(gateway, "sk-team-b")
        with pytest.raises(openai.NotFoundError):
            theirs.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.create(model="sim-model", input="x", previous_response_id=mine.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.delete(mine.id)
        assert _client(gateway, "sk-team-a").responses.retrieve(mine.id).id == mine.id
        keyless = httpx.get(f"{gateway.url}/v1/responses/{mine.id}")
        assert keyless.status_code == 401


def test_background_mode_is_a_clear_400(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        client = _client(gateway)
        with pytest.raises(openai.BadRequestError) as background:
            client.responses.create(model="sim-model", input="later", background=True)
        assert background.value.body["param"] == "background"  # type: ignore[index]
        assert "not supported by hasten" in background.value.body["message"]  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as cancel:
            client.responses.cancel("resp_123")
        assert cancel.value.body["param"] == "background"  # type: ignore[index]


def test_input_items_pages_and_refuses_bad_parameters(sim: ServerThread) -> None:
    with running_gateway(_config(sim.url)) as gateway:
        client = _client(gateway)
        items = [{"role": "user", "content": f"turn {n}"} for n in range(5)]
        created = client.responses.create(model="sim-model", input=items)  # type: ignore[arg-type]
        newest = client.responses.input_items.list(created.id, limit=2)
        assert _user_texts(newest.data) == ["turn 4", "turn 3"] and newest.has_more
        rest = client.responses.input_items.list(created.id, limit=10, after=newest.data[-1].id)
        assert _user_texts(rest.data) == ["turn 2", "turn 1", "turn 0"] and not rest.has_more
        base = f"{gateway.url}/v1/responses/{created.id}/input_items"
        for query, param in (("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order")):
            answer = httpx.get(f"{base}?{query}", headers=AUTH)
            assert answer.status_code == 400 and answer.json()["error"]["param"] == param
        assert httpx.post(base, headers=AUTH).status_code == 405
        assert httpx.get(f"{gateway.url}/responses/{created.id}", headers=AUTH).status_code == 200


def test_a_second_replica_finds_what_the_first_stored(sim: ServerThread, redis_url: str) -> None:
    """With ``[fleet]`` the records live in its Redis: a follow-up, a retrieve and a delete
    through another replica find a response stored through the first."""
    fleet = FleetConfig(redis_url=redis_url, key_prefix=f"test:{uuid.uuid4().hex}:")
    config = replace(_config(sim.url), fleet=fleet)
    with running_gateway(config) as first, running_gateway(config) as second:
        created = _client(first).responses.create(model="sim-model", input="Shared.")
        other = _client(second)
        assert other.responses.retrieve(created.id).output_text == created.output_text
        follow = other.responses.create(
            model="sim-model", input="Next.", previous_response_id=created.id
        )
        assert _user_texts(_client(first).responses.input_items.list(follow.id).data) == [
            "Next.",
            "Shared.",
        ]
        other.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            _client(first).responses.retrieve(created.id)


# --- the previous response's id, passed to the deployment that holds it -------------------


@pytest.fixture
def native_sim() -> Iterator[tuple[ServerThread, BodyRecorder]]:
    """A simulator of its own (its counters are this test's), its Responses bodies kept."""
    recorder = BodyRecorder(
        build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0)), "/responses"
    )
    with ServerThread(recorder) as server:
        yield server, recorder


def _counted(sim_url: str) -> tuple[int, int]:
    """(requests naming a previous_response_id, requests resending the conversation)."""
    stats = sim_stats(sim_url)
    return stats["num_previous_response_ids"], stats["num_resent_histories"]


WALNUT = "Remember the word walnut."


@contextmanager
def _native_client(sim: ServerThread) -> Iterator[openai.OpenAI]:
    """The SDK through a gateway whose upstream speaks Responses (it holds its answers)."""
    with running_gateway(_config(sim.url, apis=CLIENT_APIS)) as gateway:
        yield _client(gateway)


def _text_of(content: object) -> object:
    """A chat message's text, whether a string or a list of text parts."""
    if isinstance(content, list):
        return "".join(part["text"] for part in content)
    return content


def test_the_deployment_holding_the_previous_response_gets_its_id(
    native_sim: tuple[ServerThread, BodyRecorder],
) -> None:
    sim, recorder = native_sim
    with _native_client(sim) as client:
        first = client.responses.create(model="sim-model", input=WALNUT)
        second = client.responses.create(
            model="sim-model", input="Which word?", previous_response_id=first.id
        )
        with client.responses.stream(
            model="sim-model", input="And again?", previous_response_id=second.id
        ) as stream:
            for _ in stream:
                pass
            third = stream.get_final_response()
        assert _counted(sim.url) == (2, 0)
        assert second.previous_response_id == first.id
        assert third.previous_response_id == second.id
        sent = [orjson.loads(body) for body in recorder.bodies]
        assert sent[1]["previous_response_id"] == first.id
        assert sent[1]["input"] == "Which word?"  # the client's own input, not the history
        assert sent[2]["previous_response_id"] == second.id
        # Smaller than the conversation: none of the earlier turns is resent.
        assert all(b"walnut" not in body for body in recorder.bodies[1:])
        assert all(first.output_text.encode() not in body for body in recorder.bodies[1:])
        # hasten's copy of the conversation is whole all the same.
        listed = client.responses.input_items.list(third.id, order="asc")
        assert _user_texts(listed.data) == [
            WALNUT,
            "Which word?",
            "And again?",
        ]


def test_a_failover_to_a_chat_only_deployment_gets_the_conversation_whole(
    native_sim: tuple[ServerThread, BodyRecorder],
) -> None:
    native, _ = native_sim
    chat_recorder = BodyRecorder(build_app(SimConfig(ttft_base_ms=0, decode_ms_per_token=0)))
    with ServerThread(chat_recorder) as chat_sim:
        config = make_config(
            {"native": native.url + "/v1", "chat": chat_sim.url + "/v1"},
            fallbacks=("chat",),
            cache=MEMORY_CACHE,
            apis=CLIENT_APIS,
        )
        chat_only = replace(config.upstreams["chat"], apis=("chat",))
        config = replace(config, upstreams={**config.upstreams, "chat": chat_only})
        with running_gateway(config) as gateway:
            client = _client(gateway)
            first = client.responses.create(model="sim-model", input=WALNUT)
            # Every try on the holder fails: the follow-up fails over, expanded.
            httpx.post(f"{native.url}/sim/burst", json={"num_requests": 50, "status": 503})
            raw = client.responses.with_raw_response.create(
                model="sim-model", input="Which word?", previous_response_id=first.id
            )
            httpx.post(f"{native.url}/sim/burst", json={"num_requests": 0})
            follow = raw.parse()
            assert raw.headers["x-hasten-upstream"] == "chat"
            assert "native=503" in raw.headers["x-hasten-failover"]
            assert follow.status == "completed" and follow.output_text
            assert follow.previous_response_id == first.id  # echoed, though translated
            (chat,) = [orjson.loads(body) for body in chat_recorder.bodies]
            contents = [_text_of(message["content"]) for message in chat["messages"]]
            assert contents == [WALNUT, first.output_text, "Which word?"]
            # The follow-up's answer is hasten's own id: its own follow-up is expanded for
            # the holder too (which never saw it).
            again = client.responses.create(
                model="sim-model", input="Once more.", previous_response_id=follow.id
            )
            assert again.status == "completed"
            # The holder's three tries (a try and two retries) named the id; the last
            # follow-up came to it whole.
            assert _counted(native.url) == (3, 1)


def test_a_holder_that_lost_the_id_is_sent_the_conversation_whole(
    native_sim: tuple[ServerThread, BodyRecorder],
) -> None:
    sim, recorder = native_sim
    with _native_client(sim) as client:
        first = client.responses.create(model="sim-model", input=WALNUT)
        assert httpx.delete(f"{sim.url}/v1/responses/{first.id}").status_code == 200
        raw = client.responses.with_raw_response.create(
            model="sim-model", input="Which word?", previous_response_id=first.id
        )
        follow = raw.parse()
        assert follow.status == "completed" and follow.previous_response_id == first.id
        assert "x-hasten-failover" not in raw.headers  # no failure counted, nothing seen
        assert _counted(sim.url) == (1, 1)
        assert sim_stats(sim.url)["num_bad_requests"] == 1  # the holder's 400, then the resend
        resent = orjson.loads(recorder.bodies[-1])
        assert "previous_response_id" not in resent
        assert resent["input"][0] == {
            "type": "message",
            "role": "user",
            "content": WALNUT,
        }


def test_a_cache_hits_id_is_expanded_for_every_deployment(
    native_sim: tuple[ServerThread, BodyRecorder],
) -> None:
    sim, _ = native_sim
    with _native_client(sim) as client:
        client.responses.create(model="sim-model", input="Hit me.", temperature=0)
        raw = client.responses.with_raw_response.create(
            model="sim-model", input="Hit me.", temperature=0
        )
        assert raw.headers["x-hasten-cache"] == "hit"
        follow = client.responses.create(
            model="sim-model", input="Next.", previous_response_id=raw.parse().id
        )
        assert follow.status == "completed"
        assert follow.previous_response_id == raw.parse().id
        assert _counted(sim.url) == (0, 1)  # the fresh id is hasten's: no upstream holds it


def test_another_tenants_id_is_a_404_never_passed_on(
    native_sim: tuple[ServerThread, BodyRecorder],
) -> None:
    sim, _ = native_sim
    with running_gateway(_config(sim.url, apis=CLIENT_APIS, keys=KEYS)) as gateway:
        mine = _client(gateway, "sk-team-a").responses.create(model="sim-model", input="Mine.")
        with pytest.raises(openai.NotFoundError):
            _client(gateway, "sk-team-b").responses.create(
                model="sim-model", input="x", previous_response_id=mine.id
            )
        assert _counted(sim.url) == (0, 0)


@MODES
def test_a_follow_up_echoes_its_previous_response_id(
    sim: ServerThread, apis: tuple[str, ...]
) -> None:
    """Whatever served it: translated, or from the cache entry of the same conversation
    sent whole (whose first answer echoed no id)."""
    with running_gateway(_config(sim.url, apis=apis)) as gateway:
        client = _client(gateway)
        first_raw = client.responses.with_raw_response.create(
            model="sim-model", input=f"Echo {apis}.", temperature=0
        )
        first = first_raw.parse()
        whole = [
            {"type": "message", "role": "user", "content": f"Echo {apis}."},
            *first_raw.http_response.json()["output"],
            {"type": "message", "role": "user", "content": "Next."},
        ]
        sent_whole = client.responses.create(model="sim-model", input=whole, temperature=0)
        assert sent_whole.previous_response_id is None
        chained = client.responses.with_raw_response.create(
            model="sim-model", input="Next.", previous_response_id=first.id, temperature=0
        )
        assert chained.headers["x-hasten-cache"] == "hit"
        assert chained.parse().previous_response_id == first.id
        assert client.responses.retrieve(chained.parse().id).previous_response_id == first.id
        with client.responses.stream(
            model="sim-model", input="Next.", previous_response_id=first.id, temperature=0
        ) as stream:
            events = list(stream)
            streamed = stream.get_final_response()
        assert streamed.previous_response_id == first.id
        assert events[0].response.previous_response_id == first.id  # type: ignore[union-attr]
        # and the other way: a whole conversation hitting the chained request's entry.
        again = client.responses.create(model="sim-model", input=whole, temperature=0)
        assert again.previous_response_id is None
