"""The fleets issue 13's acceptance scenarios run on (tests/support/fleet_checks.py): each
replica's config, and which simulators and ``[fleet]`` settings each fleet has."""

from __future__ import annotations

from pathlib import Path

from tests.support.fleet import Endpoints, Fleet

# A dead leader is noticed within lease_s; replicas see each other's routing news within a
# few sync intervals.
FLEET_OPTIONS: dict[str, object] = {"lease_s": 1.0, "sync_interval_s": 0.1}
ROUTED_TTFT_TIMEOUT_S = 0.3
HEDGE_BUDGET = 0.05
HEDGE_BURST = 3
LIMITED_KEY = "sk-fleet-limited"
LIMITED_KEY_ENV = "FLEET_LIMITED_KEY"
REQUESTS_PER_MINUTE = 100


def two_sim_config(ends: Endpoints) -> str:
    """``sim-model`` on simulator a; ``routed`` (TTFT timeout) and ``hedged`` (a fixed 20 ms
    hedge delay, a token-bucket budget) on a and b; the exact cache in Redis."""
    return f"""
[upstreams.a]
url = "{ends.sims["a"]}"
[upstreams.b]
url = "{ends.sims["b"]}"
[models.sim-model]
upstream = "a"
[models.routed]
deployments = [{{ upstream = "a" }}, {{ upstream = "b" }}]
[models.routed.routing]
ttft_timeout_s = {ROUTED_TTFT_TIMEOUT_S}
[models.hedged]
deployments = [{{ upstream = "a" }}, {{ upstream = "b" }}]
[models.hedged.routing.hedge]
enabled = true
max_hedges = 1
min_delay_ms = 20
max_delay_ms = 20
budget = {HEDGE_BUDGET}
budget_burst = {HEDGE_BURST}
[cache]
backend = "redis"
redis_url = "{ends.redis_url}"
"""


def one_sim_config(ends: Endpoints, *, server: str = "") -> str:
    return f"""{server}
[upstreams.a]
url = "{ends.sims["a"]}"
[models.sim-model]
upstream = "a"
[cache]
backend = "redis"
redis_url = "{ends.redis_url}"
"""


LIMITED_SERVER = f"""[[server.api_keys]]
tenant = "limited"
api_key_env = "{LIMITED_KEY_ENV}"
requests_per_minute = {REQUESTS_PER_MINUTE}
"""


def shared_fleet(workdir: Path) -> Fleet:
    """For the checks that neither kill a replica nor need a key limit."""
    sims: dict[str, tuple[str, ...]] = {"a": (), "b": ()}
    return Fleet(workdir, config=two_sim_config, simulators=sims, fleet_options=FLEET_OPTIONS)


def single_sim_fleet(workdir: Path) -> Fleet:
    """One simulator: kill_leader slows its answers down, redis_loss (run after it, on the
    two replicas left) does not."""
    sims: dict[str, tuple[str, ...]] = {"a": ()}
    return Fleet(workdir, config=one_sim_config, simulators=sims, fleet_options=FLEET_OPTIONS)


def limited_fleet(workdir: Path) -> Fleet:
    """A gateway key limited to REQUESTS_PER_MINUTE (a static ``[server] api_keys`` entry)."""

    def config(ends: Endpoints) -> str:
        return one_sim_config(ends, server=LIMITED_SERVER)

    return Fleet(
        workdir,
        config=config,
        simulators={"a": ()},
        fleet_options=FLEET_OPTIONS,
        env={LIMITED_KEY_ENV: LIMITED_KEY},
    )
