"""Hosts that spell a refused address in ways a guard reading the URL as typed would miss,
each with the reason the gateway gives for refusing it."""

# ruff: noqa: RUF001  (characters that look like ASCII digits and dots are the point)

from __future__ import annotations

REFUSED_SPELLINGS = {
    "⓪.⓪.⓪.⓪": "0.0.0.0 is unspecified",
    "①⑥⑨.②⑤④.①⑥⑨.②⑤④": "169.254.169.254 is link-local",
    "１６９．２５４．１６９．２５４": "169.254.169.254 is link-local",
    "[64:ff9b::a9fe:a9fe]": "NAT64 address of 169.254.169.254, which is link-local",
    "[64:ff9b:1::a9fe:a9fe]": "local-use NAT64 address of 169.254.169.254, which is link-local",
    "[2002:a9fe:a9fe::]": "6to4 address of 169.254.169.254, which is link-local",
    "[::169.254.169.254]": "IPv4-compatible address of 169.254.169.254, which is link-local",
    "[fd00:ec2::254]": "fd00:ec2::254 is a cloud metadata address",
}
# The same spellings at delivery or call time: those that would reach this machine (0.0.0.0)
# were the guard wrong, and the others (which the tests' connectors never open either).
STORED_SPELLINGS = ["⓪.⓪.⓪.⓪", "０.０.０.０", "[::ffff:0.0.0.0]", "[64:ff9b::a9fe:a9fe]"]
FULLWIDTH_LOOPBACK = "１２７.０.０.１"
