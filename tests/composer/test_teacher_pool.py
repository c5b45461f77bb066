"""TeacherPool against real HTTP servers on 127.0.0.1 (tests/composer/conftest.py) with injected faults."""

import json
import logging
import socket
import uuid

import pytest
from omegaconf import OmegaConf

from recipe.composer.config_check import COMPOSER_YAML
from verl_ext.composer import TeacherConfig, TeacherPool, TeacherPoolConfig, TeacherRequest

FAST = dict(backoff_base_s=0.01, backoff_max_s=0.05)
# composer.yaml's teacher pool values (TeacherPoolConfig has no defaults); its cache path is in a run's directory
RECIPE_POOL = {
    k: v
    for k, v in OmegaConf.to_container(OmegaConf.load(COMPOSER_YAML).composer.replay.teacher_pool).items()
    if k not in ("teachers", "cache_path")
}


def pool_config(teachers, **changes) -> TeacherPoolConfig:
    """The recipe's pool settings for `teachers`, no cache unless `cache_path` is given, and `changes`."""
    return TeacherPoolConfig(teachers=teachers, **{**RECIPE_POOL, "cache_path": None, **changes})


def teacher(server, model, name=None, **kw):
    timeout_s = kw.pop("timeout_s", 5.0)
    return TeacherConfig(name=name or model, base_url=server.base_url, model=model, timeout_s=timeout_s, **kw)


def requests(n, trace="t0"):
    return [TeacherRequest(trace, step, [{"role": "user", "content": f"state {step}"}]) for step in range(n)]


def dead_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens here once the socket is closed


def test_parallel_answers_from_every_teacher(chat_server):
    teachers = (
        teacher(chat_server, "slow:0.2", name="a"),
        teacher(chat_server, "ok", name="b"),
        teacher(chat_server, "ok", name="c", max_tokens=7),
    )
    with TeacherPool(pool_config(teachers, max_workers=6, **FAST)) as pool:
        results = pool.query_many(requests(3))
        stats = pool.stats()
    for step, answers in enumerate(results):
        assert answers["a"].text == f"slow:0.2 says state {step}"
        assert answers["b"].text == f"ok says state {step}"
        assert answers["c"].tokens == 100 and not answers["c"].cached
    assert stats["calls"] == 9 and stats["successes"] == 9 and stats["tokens"] == 900
    assert stats["failures"] == {} and stats["retries"] == 0
    assert chat_server.max_in_flight >= 2  # requests really overlapped


def test_faults_are_counted_and_never_raise(chat_server):
    teachers = (
        teacher(chat_server, "ok"),
        teacher(chat_server, "fail_500_then_ok:2"),
        teacher(chat_server, "fail_429_then_ok:1"),
        teacher(chat_server, "always_500"),
        teacher(chat_server, "malformed"),
        teacher(chat_server, "no_choices"),
        teacher(chat_server, "http_401"),
        teacher(chat_server, "slow:1.0", timeout_s=0.2),
        TeacherConfig(name="dead", base_url=dead_url(), model="m", timeout_s=1.0),
    )
    with TeacherPool(pool_config(teachers, max_retries=2, max_workers=9, **FAST)) as pool:
        (answers,) = pool.query_many(requests(1))
        stats = pool.stats()
    answered = {name for name, a in answers.items() if a is not None}
    assert answered == {"ok", "fail_500_then_ok:2", "fail_429_then_ok:1"}
    assert stats["failures"] == {
        "http_5xx": 1,
        "malformed": 2,
        "http_4xx": 1,
        "timeout": 1,
        "connection": 1,
    }
    # retried: 2 (flaky 500) + 1 (429) + 2 (always 500) + 2 (timeout) + 2 (dead); never malformed or 401
    assert stats["retries"] == 9
    assert chat_server.calls["always_500"] == 3 and chat_server.calls["malformed"] == 1
    assert chat_server.calls["http_401"] == 1 and chat_server.calls["fail_500_then_ok:2"] == 3
    assert stats["attempt_errors"]["http_5xx"] == 2 + 3 and stats["attempt_errors"]["http_429"] == 1


def test_a_teacher_server_killed_mid_run_is_counted_by_name_and_the_others_go_on(chat_server):
    """One of two teacher servers stops (its process gone: connections refused): its queries fail within the pool's
    retries (seconds, never a hang), counted under its name; it is `down` until it answers again; the other teacher
    still answers. With on_teacher_down=fail, `check_teachers_up` stops the run naming it."""
    import time

    from tests.composer.conftest import ScriptedChatServer
    from verl_ext.composer.teacher_pool import TeacherDown, check_teachers_up

    doomed = ScriptedChatServer()
    teachers = (teacher(chat_server, "ok", name="alive"), teacher(doomed, "ok", name="doomed", timeout_s=2.0))
    with TeacherPool(pool_config(teachers, max_retries=2, max_workers=2, **FAST)) as pool:
        (before,) = pool.query_many(requests(1))
        assert all(a is not None for a in before.values()) and pool.stats()["down"] == {}
        doomed.close()  # the server's process is gone
        start = time.monotonic()
        after = pool.query_many(requests(3, trace="t1"))
        elapsed = time.monotonic() - start
        stats = pool.stats()
    assert elapsed < 10, elapsed
    assert [a["alive"] is not None for a in after] == [True] * 3 and all(a["doomed"] is None for a in after)
    assert stats["failures_by_teacher"] == {"doomed": 3} and stats["failures"] == {"connection": 3}
    assert list(stats["down"]) == ["doomed"] and "connection at http://127.0.0.1:" in stats["down"]["doomed"]
    check_teachers_up(stats, "continue")  # goes on
    with pytest.raises(TeacherDown, match=r"teacher stopped answering: doomed \(connection at http://127"):
        check_teachers_up(stats, "fail")


def test_down_is_a_connection_error_or_timeout_and_ends_when_the_teacher_answers(chat_server):
    """A 500 is not down; a dropped connection is, until the teacher answers again."""
    flaky = teacher(chat_server, "fail_500_then_ok:1", name="flaky")
    back = teacher(chat_server, "hangup_then_ok:1", name="back")
    with TeacherPool(pool_config((flaky, back), max_retries=0, max_workers=2, **FAST)) as pool:
        pool.query_many(requests(1))
        first = pool.stats()
        pool.query_many(requests(1, trace="t2"))
        second = pool.stats()
    assert first["down"].keys() == {"back"} and first["failures_by_teacher"] == {"flaky": 1, "back": 1}
    assert second["down"] == {} and second["successes"] == 2


def test_call_cap_holds_and_is_reported(chat_server, caplog):
    teachers = tuple(teacher(chat_server, "ok", name=n) for n in "abc")
    config = pool_config(teachers, max_calls=5, max_workers=4, **FAST)
    with caplog.at_level(logging.WARNING), TeacherPool(config) as pool:
        results = pool.query_many(requests(3))
        later = pool.query(requests(1, trace="t1")[0])
        stats = pool.stats()
    assert sum(chat_server.calls.values()) == 5
    assert sum(a is not None for r in results for a in r.values()) == 5
    assert all(a is None for a in later.values())
    assert stats["budget_exhausted"] and stats["calls"] == 5 and stats["failures"] == {"budget": 7}
    assert sum("spend cap reached" in r.message for r in caplog.records) == 1


def test_token_cap_holds(chat_server):
    config = pool_config((teacher(chat_server, "ok"),), max_total_tokens=250, max_workers=1, **FAST)
    with TeacherPool(config) as pool:
        results = pool.query_many(requests(6))
        stats = pool.stats()
    # 100 tokens per answer: calls start at 0, 100 and 200 tokens used; at 300 the cap stops the rest
    assert chat_server.calls["ok"] == 3
    assert [r["ok"] is not None for r in results] == [True] * 3 + [False] * 3
    assert stats["tokens"] == 300 and stats["budget_exhausted"]


def test_missing_usage_is_charged_max_tokens(chat_server):
    only = (teacher(chat_server, "no_usage", max_tokens=40),)
    config = pool_config(only, max_total_tokens=100, max_workers=1)
    with TeacherPool(config) as pool:
        pool.query_many(requests(4))
        stats = pool.stats()
    assert chat_server.calls["no_usage"] == 3 and stats["tokens"] == 120 and stats["missing_usage"] == 3


def test_cache_prevents_paying_twice_across_restarts(chat_server, tmp_path):
    cache = tmp_path / "teacher_cache.jsonl"
    teachers = (teacher(chat_server, "ok", name="a"), teacher(chat_server, "fail_500_then_ok:1", name="b"))
    config = pool_config(teachers, cache_path=str(cache), **FAST)
    with TeacherPool(config) as pool:
        first = pool.query_many(requests(3))
    calls_after_first = sum(chat_server.calls.values())
    assert calls_after_first == 3 + 4  # b's first call failed once
    with TeacherPool(config) as restarted:  # a new process would do the same: the cache is reread from disk
        second = restarted.query_many(requests(3))
        stats = restarted.stats()
    assert sum(chat_server.calls.values()) == calls_after_first
    assert stats["cache_hits"] == 6 and stats["calls"] == 0
    assert [{k: v.text for k, v in r.items()} for r in first] == [{k: v.text for k, v in r.items()} for r in second]
    assert all(a.cached for r in second for a in r.values())
    # a different model under the same teacher name is not served from the cache
    changed = pool_config((teacher(chat_server, "slow:0", name="a"),), cache_path=str(cache))
    with TeacherPool(changed) as pool:
        (answers,) = pool.query_many(requests(1))
    assert answers["a"].text == "slow:0 says state 0" and chat_server.calls["slow:0"] == 1


def test_torn_cache_line_is_skipped(chat_server, tmp_path):
    cache = tmp_path / "cache.jsonl"
    config = pool_config((teacher(chat_server, "ok"),), cache_path=str(cache))
    with TeacherPool(config) as pool:
        pool.query_many(requests(2))
    with cache.open("a") as f:
        f.write('{"trace_id": "t0", "step": 2, "teach')  # crash mid-write
    with TeacherPool(config) as pool:
        results = pool.query_many(requests(3))
    assert chat_server.calls["ok"] == 3 and all(r["ok"] is not None for r in results)


def test_api_key_never_leaks(chat_server, tmp_path, caplog, monkeypatch):
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("COMPOSER_TEST_KEY", secret)
    teachers = tuple(
        teacher(chat_server, model, api_key_env="COMPOSER_TEST_KEY", timeout_s=0.2)
        for model in ("ok", "always_500", "malformed", "http_401", "slow:1.0")
    ) + (TeacherConfig(name="dead", base_url=dead_url(), model="m", api_key_env="COMPOSER_TEST_KEY", timeout_s=0.5),)
    config = pool_config(teachers, cache_path=str(tmp_path / "cache.jsonl"), max_retries=1, **FAST)
    (tmp_path / "pool_config.json").write_text(json.dumps(config.to_dict()))
    with caplog.at_level(logging.DEBUG), TeacherPool(config) as pool:
        pool.query_many(requests(2))
        texts = [repr(pool), str(pool), repr(config), str(pool.stats())]
    assert chat_server.auth_headers.count(f"Bearer {secret}") == len(chat_server.auth_headers) > 0  # it was sent
    assert caplog.records, "expected some log records (failures are logged)"
    assert secret not in caplog.text
    assert all(secret not in t for t in texts)
    written = list(tmp_path.iterdir())
    assert {p.name for p in written} == {"cache.jsonl", "pool_config.json"}
    for path in written:
        assert secret not in path.read_text()
    assert "COMPOSER_TEST_KEY" in (tmp_path / "pool_config.json").read_text()


def test_submit_many_does_not_block(chat_server):
    config = pool_config((teacher(chat_server, "slow:0.3"),))
    with TeacherPool(config) as pool:
        future = pool.submit_many(requests(2))
        assert not future.done()  # the caller gets control back while the teacher is still thinking
        results = future.result(timeout=10)
    assert [r["slow:0.3"].text for r in results] == ["slow:0.3 says state 0", "slow:0.3 says state 1"]


def test_config_errors_are_early(monkeypatch):
    monkeypatch.delenv("COMPOSER_UNSET_KEY", raising=False)
    good = dict(name="a", base_url="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match="COMPOSER_UNSET_KEY is not set"):
        TeacherPool(pool_config((TeacherConfig(**good, api_key_env="COMPOSER_UNSET_KEY"),)))
    with pytest.raises(ValueError, match="base_url"):
        TeacherConfig(name="a", base_url="127.0.0.1:8000", model="m")
    with pytest.raises(ValueError, match="unique"):
        pool_config((TeacherConfig(**good), TeacherConfig(**good)))
    with pytest.raises(ValueError, match="unknown teacher pool config keys"):
        TeacherPoolConfig.from_dict({"teachers": [good], "max_call": 3})
    with pytest.raises(ValueError, match="unknown teacher config keys"):
        TeacherPoolConfig.from_dict({"teachers": [{**good, "api_key": "sk-inline"}]})
    with pytest.raises(ValueError, match="max_calls"):
        pool_config((TeacherConfig(**good),), max_calls=-1)
    parsed = TeacherPoolConfig.from_dict({**RECIPE_POOL, "cache_path": None, "teachers": [good], "max_calls": 3})
    assert parsed.teachers[0].model == "m" and parsed.max_calls == 3


def test_spend_caps_and_cache_have_no_silent_default():
    """A cap or cache left out is an error naming it, not "no cap" (a trap for a paid API) nor a second copy of
    composer.yaml's values; null switches one off, written out."""
    good = dict(name="a", base_url="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match=r"missing teacher pool config keys \['cache_path', 'max_calls', "):
        TeacherPoolConfig.from_dict({"teachers": [good]})
    with pytest.raises(TypeError, match="max_calls"):
        TeacherPoolConfig(teachers=(TeacherConfig(**good),))
    uncapped = pool_config((TeacherConfig(**good),), max_calls=None, max_total_tokens=None)
    assert uncapped.max_calls is None and uncapped.max_total_tokens is None
