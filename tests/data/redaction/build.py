"""Writes labelled.jsonl, the labelled redaction set (deterministic: seeded).

    python tests/data/redaction/build.py

Each line: {"class": C, "text": T, "secret": S} (a positive: S, inside T, must not survive
redaction) or {"class": "negative", "kind": K, "text": T} (must come out unchanged). The
positives are synthetic values in the real formats (checksums valid where the format has one:
Luhn, IBAN mod-97, SSN area/group/serial rules); contexts are prose, JSON and log lines.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

rng = random.Random(11)
ALNUM = string.ascii_letters + string.digits
CONTEXTS = ["here is {} for you", '{{"content": "value: {}"}}', "log: got {} from upstream",
            "{}", "Please use {}, thanks.", "tool output:\\n{}\\nend"]


def pick(chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + pick(string.digits, length - len(prefix) - 1)
    for d in string.digits:
        digits = body + d
        total = sum(int(c) if i % 2 == 0 else (2 * int(c) - 9 if int(c) > 4 else 2 * int(c))
                    for i, c in enumerate(reversed(digits)))
        if total % 10 == 0:
            return digits
    raise AssertionError


def iban(country: str, bban: str) -> str:
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(c, 36)) for c in moved)) % 97
    raw = f"{country}{check:02d}{bban}"
    return " ".join(raw[i:i + 4] for i in range(0, len(raw), 4)) if rng.random() < .5 else raw


def jwt() -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    return ".".join([enc({"alg": "HS256", "typ": "JWT"}),
                     enc({"sub": pick(string.digits, 8), "name": "Jane"}),
                     pick(ALNUM + "-_", 43)])


def pem() -> str:
    kind = rng.choice(["RSA ", "EC ", "", "OPENSSH "])
    body = "\n".join(pick(ALNUM + "+/", 64) for _ in range(rng.randint(2, 6)))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def phone() -> str:
    return rng.choice([
        lambda: f"+44 20 {pick(string.digits, 4)} {pick(string.digits, 4)}",
        lambda: f"+49 30 {pick(string.digits, 6)}",
        lambda: f"+33 1 {pick(string.digits, 2)} {pick(string.digits, 2)} "
                f"{pick(string.digits, 2)} {pick(string.digits, 2)}",
        lambda: f"+81 3-{pick(string.digits, 4)}-{pick(string.digits, 4)}",
        lambda: f"+91 98{pick(string.digits, 3)} {pick(string.digits, 5)}",
        lambda: f"+1 (415) {pick(string.digits, 3)}-{pick(string.digits, 4)}",
        lambda: f"+55 11 9{pick(string.digits, 4)}-{pick(string.digits, 4)}",
        lambda: f"(212) {pick('23456789', 1)}{pick(string.digits, 2)}-{pick(string.digits, 4)}",
        lambda: f"415-{pick('23456789', 1)}{pick(string.digits, 2)}-{pick(string.digits, 4)}",
        lambda: f"+61 2 {pick(string.digits, 4)} {pick(string.digits, 4)}",
    ])()


def ssn() -> str:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


POSITIVES = {
    "aws_secret_key": lambda: pick(ALNUM + "/+", 18) + "A" + "b" + "7" + pick(ALNUM + "/+", 19),
    "github_pat": lambda: "github_pat_" + pick(ALNUM, 22) + "_" + pick(ALNUM, 59),
    "stripe_key": lambda: rng.choice(["sk_live_", "sk_test_", "rk_live_"]) + pick(ALNUM, 24),
    "jwt": jwt,
    "private_key": pem,
    "iban": lambda: rng.choice([
        lambda: iban("DE", pick(string.digits, 18)), lambda: iban("GB", "NWBK" + pick(
            string.digits, 14)), lambda: iban("FR", pick(string.digits, 23)),
        lambda: iban("NL", "ABNA" + pick(string.digits, 10)),
        lambda: iban("ES", pick(string.digits, 20))])(),
    "ssn": ssn,
    "phone": phone,
    "email": lambda: f"{pick(string.ascii_lowercase, 6)}.{pick(string.ascii_lowercase, 4)}"
                     f"@{rng.choice(['example.com', 'mail.example.co.uk', 'corp.io'])}",
    "credit_card": lambda: rng.choice([
        lambda: luhn_complete("4", 16), lambda: luhn_complete("51", 16),
        lambda: luhn_complete("37", 15)])(),
    "bearer_token": lambda: "Bearer " + pick(ALNUM + "-._~", 32),
    "openai_key": lambda: "sk-proj-" + pick(ALNUM, 40),
    "aws_access_key_id": lambda: "AKIA" + pick(string.ascii_uppercase + string.digits, 16),
}

NEGATIVES = {
    "date": ["on 2024-05-01 at 10:30", "2024-05-01T10:30:00Z", "dated 05/01/2024"],
    "version": ["version 1.2.3", "v10.11.12 released", "python 3.11.7"],
    "ip": ["ip 192.168.1.10 port 8080", "10.0.0.1:4317"],
    "uuid": ["trace 0af76519-16cd-43dd-8448-eb211c80319c",
             "id 550e8400-e29b-41d4-a716-446655440000"],
    "git_sha": ["commit 3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f", "sha e5c8860a" + "0" * 32],
    "order": ["reservation ABC123, 3 bags", "order #1234567 shipped", "ticket 12345678"],
    "amount": ["total $1,234.56 due", "EUR 2.500,00", "1,000,000 tokens"],
    "math": ["12 + 34 = 46", "x = 3.14159 * r ** 2", "ratio 0.95 over 10 steps"],
    "path": ["/usr/local/bin/python3", "C:\\Users\\jane\\file.txt", "src/otel_eval/model.py"],
    "url": ["https://example.com/docs?page=2", "see http://localhost:4318/v1/traces"],
    "prose": ["The bearer of this letter is welcome.", "Use a password manager.",
              "Tokens are counted per request.", "The secret is to keep going.",
              "Email me later about it.", "Call me maybe."],
    "number": ["1234567890", "count 987654321", "timestamp 1714560000000",
               "4111 1111 1111 1112 (not luhn)", "port 65535"],
    "code": ["def f(x): return x * 2", "for i in range(10): print(i)",
             'json.dumps({"a": 1})', "SELECT * FROM users WHERE id = 42"],
    "hash": ["md5 d41d8cd98f00b204e9800998ecf8427e", "sha256 e3b0c44298fc1c149afbf4c8996fb924"
             "27ae41e4649b934ca495991b7852b855"],
    "base64_text": ["aGVsbG8gd29ybGQ=", "data:image/png;base64,iVBORw0KGgo=",
                    # 40 characters of mixed-case base64: indistinguishable from an AWS secret
                    "request id Tm90QVNlY3JldEp1c3RBbklkZW50aWZpZXIxMjM0",
                    "etag W/Zm9vYmFyMTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3Bx"],
    "identifiers": ["user_id=12345", "session abc-def-ghi", "ISBN 978-3-16-148410-0",
                    "DE-12345 postal", "GB 123 4567 89"],
    "phone_like": ["room 101-102", "pages 12-34", "call ext. 1234", "sizes 10.5 11.0 12.5"],
}


def main() -> None:
    lines = []
    for cls, make in POSITIVES.items():
        for i in range(20):
            secret = make()
            ctx = CONTEXTS[i % len(CONTEXTS)]
            inside_json = ctx.startswith('{"') or "\\n" in ctx  # as it sits in a JSON string
            shown = json.dumps(secret)[1:-1] if inside_json else secret
            lines.append({"class": cls, "text": ctx.format(shown), "secret": shown})
    for kind, texts in NEGATIVES.items():
        lines += [{"class": "negative", "kind": kind, "text": t} for t in texts]
    out = Path(__file__).with_name("labelled.jsonl")
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"{out}: {len(lines)} lines")


if __name__ == "__main__":
    main()
