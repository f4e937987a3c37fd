"""The operator's quantity parser (builders.common.parse_quantity) reads every form the API's schema admits as
Kubernetes does: the same numbers as lightkube's parser where both read a form, exponents with a capital E too,
and refuses what the schema refuses."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from lightkube.utils.quantity import parse_quantity as lightkubes

from kubepool.api.common import QUANTITY_PATTERN
from kubepool.controller.builders.common import parse_quantity

SAME = ["0", "3", "+4", "12", "2.5", ".5", "500m", "100m", "1k", "1M", "1.5G", "7T", "1P", "1E", "128Mi", "13Gi",
        "0.25Mi", "1Ki", "1Ti", "1Pi", "1Ei", "1e3", "5e-1", "2e+2"]


@pytest.mark.parametrize("text", SAME)
def test_the_same_numbers_as_lightkube(text: str) -> None:
    assert re.match(QUANTITY_PATTERN, text)
    assert parse_quantity(text) == lightkubes(text)


def test_a_capital_exponent_is_an_exponent_not_exa() -> None:
    assert parse_quantity("1E3") == 1000 and parse_quantity("3E+2") == 300 and parse_quantity(" 2Gi ") == 2 * 2**30
    assert parse_quantity("1E") == Decimal(10) ** 18
    assert parse_quantity("9" * 60 + "e99") > 0 and parse_quantity("1e-99") > 0  # the extremes the schema admits


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "1.2.3", "--1", "-1", "1e", "1n", "1u", "Gi", "1 Gi",
                                  "1e999", "1e99999999999", "1E+100"])
def test_what_the_schema_refuses_is_refused(text: str) -> None:
    assert not re.match(QUANTITY_PATTERN, text.strip())
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)
