"""Prometheus samples scraped from /metrics, and how much a series moved between scrapes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.support.client import Client, token

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: Client) -> Samples:
    r = await client.call("GET", "/metrics", bearer=token("prometheus", ["a2a.metrics"]))
    assert r.status == 200, r.raw
    samples: Samples = {}
    for family in text_string_to_metric_families(r.raw.decode()):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)
