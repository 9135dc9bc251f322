"""The envelope a task message carries inside its signed body (``workers/envelope.py``): the task name,
the id and the send time must match what the message's unsigned headers say, and the time be recent."""

from __future__ import annotations

import pytest

from npuprof.workers.envelope import CLOCK_SKEW_S, envelope_problem, max_age_s

NOW = 1_800_000_000.0
SENT = {"task": "npuprof.plan_sweep", "id": "plan-1", "sent_at": NOW - 60, "nonce": "0f" * 16}


def test_a_message_whose_body_says_what_its_headers_say_runs():
    assert envelope_problem(SENT, "npuprof.plan_sweep", "plan-1", True, NOW) is None


@pytest.mark.parametrize(
    "sent, task, task_id, required, problem",
    [
        (SENT, "npuprof.run_stages", "plan-1", True, "sent as task 'npuprof.plan_sweep', its headers say"),
        (SENT, "npuprof.plan_sweep", "plan-2", False, "sent as id 'plan-1', its headers say 'plan-2'"),
        (None, "npuprof.plan_sweep", "plan-1", True, "carries no signed task name and id"),
        ("x", "npuprof.plan_sweep", "plan-1", True, "not an object"),
        ({**SENT, "sent_at": True}, "npuprof.plan_sweep", "plan-1", True, "no send time"),
        ({**SENT, "nonce": None}, "npuprof.plan_sweep", "plan-1", True, "carries no nonce"),
        ({**SENT, "nonce": "0f" * 15}, "npuprof.plan_sweep", "plan-1", False, "carries no nonce"),
    ],
    ids=["other_task", "other_id", "missing_when_signed", "not_an_object", "boolean_time", "no_nonce", "short_nonce"],
)
def test_a_message_whose_body_contradicts_its_headers_is_refused(sent, task, task_id, required, problem):
    assert problem in envelope_problem(sent, task, task_id, required, NOW)


def test_an_unsigned_message_without_an_envelope_passes_and_a_signed_one_does_not():
    """Without signing anyone may write any message: the envelope only catches a mismatch there."""
    assert envelope_problem(None, "npuprof.plan_sweep", "plan-1", False, NOW) is None


def test_an_old_message_is_a_replay_and_one_from_the_future_is_refused():
    old = {**SENT, "sent_at": NOW - max_age_s() - 1}
    assert "days ago (a replay" in envelope_problem(old, "npuprof.plan_sweep", "plan-1", True, NOW)
    assert (
        envelope_problem({**SENT, "sent_at": NOW - max_age_s() + 1}, "npuprof.plan_sweep", "plan-1", True, NOW) is None
    )
    ahead = {**SENT, "sent_at": NOW + CLOCK_SKEW_S + 1}
    assert "in the future" in envelope_problem(ahead, "npuprof.plan_sweep", "plan-1", True, NOW)
    assert (
        envelope_problem({**SENT, "sent_at": NOW + CLOCK_SKEW_S - 1}, "npuprof.plan_sweep", "plan-1", True, NOW) is None
    )
