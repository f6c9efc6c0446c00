"""What an optional stage's exception becomes (retrieval.services.degradation)."""

import logging

from engines.errors import ComponentError
from retrieval.services.degradation import degradation_of
from retrieval.types import Degradation


def warnings_of(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "search degraded"]


def test_a_typed_engine_error_keeps_its_own_cause_and_message(caplog):
    with caplog.at_level(logging.WARNING, logger="retrieval.services.search"):
        degradation = degradation_of("rerank", ComponentError("timeout", "the reranker did not answer in 2 s"))
    assert degradation == Degradation("rerank", "timeout", "the reranker did not answer in 2 s")
    [warning] = warnings_of(caplog)
    assert (warning.stage, warning.cause, warning.exc_info) == ("rerank", "timeout", None)


def test_anything_else_is_an_internal_error_whose_details_stay_in_the_log(caplog):
    with caplog.at_level(logging.WARNING, logger="retrieval.services.search"):
        degradation = degradation_of("union", KeyError("secret column name"))
    assert degradation.cause == "internal_error" and "secret" not in degradation.message
    assert degradation.message == "unexpected KeyError; details are in the service log"
    [warning] = warnings_of(caplog)
    assert warning.exc_info[0] is KeyError  # the traceback goes to the log
