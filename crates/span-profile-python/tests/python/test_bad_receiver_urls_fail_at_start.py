"""Issue 27, point 4: a receiver URL that does not parse fails in start() with a ValueError
naming the part that is wrong, and never echoes the password."""
import pytest

import span_profile

CASES = [
    ("pyroscope+http://u:SECRETPW@host:notaport", "not a number"),
    ("pyroscope+http://u:SECRETPW@host:99999", "outside 1-65535"),
    ("otlp+http://[::1", "is not closed"),
    ("otlp+http://u:SECRETPW@:4318", "host is missing"),
    ("gopher+http://u:SECRETPW@host:1", "unknown scheme"),
]


@pytest.mark.parametrize("url,part", CASES)
def test_a_bad_url_is_a_value_error_naming_the_part(url, part):
    with pytest.raises(ValueError) as e:
        span_profile.start(service="tests", output=url)
    assert part in str(e.value), str(e.value)
    assert "SECRETPW" not in str(e.value)
