"""`RAYSPEC_FUZZ_EXPLORE` as the README gives it: 1 explores new examples, unset or 0 does not."""

import pytest

from tests.fuzzing import exploring


@pytest.mark.parametrize("value, explores", [(None, False), ("0", False), ("", False), (" 0 ", False),
                                             ("1", True), ("yes", True)])
def test_fuzz_explore_is_on_only_when_set_to_other_than_0(value, explores):
    assert exploring({} if value is None else {"RAYSPEC_FUZZ_EXPLORE": value}) is explores
