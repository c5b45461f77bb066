"""The toy teacher server over real HTTP on 127.0.0.1, through the Composer's own TeacherPool."""

import json
import urllib.error
import urllib.request

import pytest

from verl_ext.composer.teacher_pool import TeacherPool, TeacherPoolConfig, TeacherRequest
from verl_ext.toy.task import compute_score, make_prompt
from verl_ext.toy.teacher_server import ToyTeacherServer


@pytest.fixture
def server():
    s = ToyTeacherServer()
    yield s
    s.close()


def test_right_and_wrong_teachers_answer_the_toy_task(server, tmp_path):
    cfg = TeacherPoolConfig.from_dict(
        {
            "teachers": [
                {"name": n, "base_url": server.base_url, "model": m, "api_key_env": None, "timeout_s": 5}
                for n, m in (("t1", "right"), ("t2", "wrong"))
            ],
            "cache_path": str(tmp_path / "cache.jsonl"),
            "max_calls": None,  # every field is required: this test's values (the recipe's are in composer.yaml)
            "max_total_tokens": None,
            "max_retries": 0,
            "backoff_base_s": 0.0,
            "backoff_max_s": 0.0,
            "max_workers": 4,
            "on_teacher_down": "continue",
        }
    )
    pool = TeacherPool(cfg)
    try:
        prompts = [make_prompt(d, d) for d in (3, 0, 7)]
        answers = pool.query_many(
            [TeacherRequest(f"trace{i}", 1, [{"role": "user", "content": p}]) for i, p in enumerate(prompts)]
        )
    finally:
        pool.close()
    for d, answer in zip((3, 0, 7), answers):
        assert compute_score("toy", answer["t1"].text, str(d))["acc"] == 1.0
        assert compute_score("toy", answer["t2"].text, str(d))["acc"] == 0.0
    assert pool.stats()["calls"] == 6 and sum(pool.stats()["failures"].values()) == 0


def test_unknown_model_and_malformed_body_are_http_errors(server):
    def post(body: bytes):
        req = urllib.request.Request(
            server.base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        return urllib.request.urlopen(req, timeout=5)

    with pytest.raises(urllib.error.HTTPError) as e:
        post(json.dumps({"model": "nobody", "messages": []}).encode())
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        post(b"{not json")
    assert e.value.code == 400
