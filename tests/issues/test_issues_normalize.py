import pytest

from otel_eval.outputs.issues.normalize import normalize


@pytest.mark.parametrize(("text", "expected"), [
    ("Tool 'web_search' failed after 3 retries", "tool <quoted> failed after <num> retries"),
    ("see https://example.com/a?b=1 now", "see <url> now"),
    ("visit www.example.org/page today", "visit <url> today"),
    ("wrote /tmp/run1/out.json and ./data/x.csv", "wrote <path> and <path>"),
    ("file /data.csv missing", "file <path> missing"),
    (r"C:\Users\bob\x.txt not found", "<path> not found"),
    ("span 98fa1dda65ab168b errored", "span <id> errored"),
    ("run 123e4567-e89b-12d3-a456-426614174000 died", "run <id> died"),
    ("user abc123def called", "user <id> called"),
    ('value "foo bar" was wrong', "value <quoted> was wrong"),
    ("used `final_answer` too early", "used <quoted> too early"),
    ("answered “Paris” instead", "answered <quoted> instead"),
    ("12.5% of 1,000 calls, -3 retries, 1e-5 lr", "<num> of <num> calls, <num> retries, <num> lr"),
    ("mail ops@example.com now", "mail <email> now"),
    ("It is the system's fault", "it is the system's fault"),
    ("  Mixed   CASE\n\twhitespace ", "mixed case whitespace"),
    ("GPT4 and step 2", "gpt4 and step <num>"),
    ("", ""),
])
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_same_failure_reads_the_same() -> None:
    a = normalize("Tool 'search' called 5 times with query \"paris\" (span 0af7651916cd43dd)")
    b = normalize("Tool 'lookup' called 12 times with query \"rome\" (span 1bf7651916cd43aa)")
    assert a == b
