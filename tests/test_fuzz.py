"""Property tests with a fixed budget: the line parsers and the dump loader never raise on random or mutated
input, and give the same answer twice. The long run is scripts/fuzz_long.py."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_targets import load_dump, mutate, parse_text, seed_dumps, seed_lines

BUDGET = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
flips = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8)
cuts = st.one_of(st.none(), st.integers(0, 20000))
# (strategy, check) pairs, reused by scripts/fuzz_long.py with a bigger budget
TARGETS = {
    "random_bytes_as_a_log": (st.binary(max_size=4096), lambda d: parse_text(d) == parse_text(d)),
    "mutated_real_lines": (st.tuples(st.lists(st.sampled_from(seed_lines()), min_size=1, max_size=20), flips, cuts),
                           lambda a: (lambda d: parse_text(d) == parse_text(d))(mutate("\n".join(a[0]).encode(), a[1], a[2]))),
    "random_text_lines": (st.text(max_size=300), lambda x: parse_text(x.encode("utf-8", "surrogatepass")) is not None),
    "random_bytes_as_a_dump": (st.binary(max_size=4096), lambda d: load_dump(d) == load_dump(d)),
    "mutated_real_dumps": (st.tuples(st.sampled_from(seed_dumps()), flips, cuts),
                           lambda a: (lambda d: load_dump(d) == load_dump(d))(mutate(*a))),
}


def _case(name: str):
    strategy, check = TARGETS[name]

    @BUDGET
    @given(strategy)
    def run(value) -> None:
        assert check(value)

    return run


test_random_bytes_as_a_log = _case("random_bytes_as_a_log")
test_mutated_real_lines = _case("mutated_real_lines")
test_random_text_lines = _case("random_text_lines")
test_random_bytes_as_a_dump = _case("random_bytes_as_a_dump")
test_mutated_real_dumps = _case("mutated_real_dumps")
