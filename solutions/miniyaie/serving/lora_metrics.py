"""LoRA adapters' residency (chapter 11) on /metrics: loads, evictions, who is in, requests per adapter."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class LoRACollector:
    """Read from engine.get_stats()["lora"] at every scrape, like the engine's other counters (api/metrics.py)."""

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        s = self.engine.get_stats()["lora"]
        yield GaugeMetricFamily("miniyaie_lora_resident_adapters", "LoRA adapters in memory now", value=len(s["resident"]))
        yield GaugeMetricFamily("miniyaie_lora_max_adapters", "LoRA adapters that fit in memory at once (max_loras)",
                                value=s["max_loras"])
        yield GaugeMetricFamily("miniyaie_lora_requests_waiting_for_adapter", "requests waiting for their adapter's load",
                                value=s["waiting_for_adapter"])
        yield CounterMetricFamily("miniyaie_lora_loads", "LoRA adapters loaded into memory", value=s["loads"])
        yield CounterMetricFamily("miniyaie_lora_evictions", "LoRA adapters evicted to make room", value=s["evictions"])
        yield CounterMetricFamily("miniyaie_lora_load_failures", "LoRA adapter loads that failed", value=s["load_failures"])
        per_adapter = CounterMetricFamily("miniyaie_lora_requests", "requests per LoRA adapter", labels=["adapter"])
        for name, count in s["requests"].items():
            per_adapter.add_metric([name], count)
        yield per_adapter
