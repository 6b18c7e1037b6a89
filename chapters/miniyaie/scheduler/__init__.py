"""Chapter 1: the scheduler — continuous batching by token budget."""

from miniyaie.scheduler.memory import KVMemory, TokenCountingMemory
from miniyaie.scheduler.policy import POLICIES, fcfs_order, lpm_order
from miniyaie.scheduler.request import FinishReason, Request, RequestStatus
from miniyaie.scheduler.scheduler import ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput

__all__ = [
    "KVMemory", "TokenCountingMemory", "POLICIES", "fcfs_order", "lpm_order",
    "FinishReason", "Request", "RequestStatus",
    "ScheduledChunk", "Scheduler", "SchedulerConfig", "SchedulerOutput",
]
