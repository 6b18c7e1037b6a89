"""Chapter 1: the scheduler — continuous batching by token budget."""

from miniyaie.scheduler.memory import KVMemory, TokenCountingMemory
from miniyaie.scheduler.policy import POLICIES, SchedulerConfig, admission_order, fcfs_order, fits_with_reserve, lpm_order
from miniyaie.scheduler.request import FinishReason, Request, RequestStatus
from miniyaie.scheduler.scheduler import Scheduler
from miniyaie.scheduler.step import ScheduledChunk, SchedulerOutput

__all__ = [
    "KVMemory", "TokenCountingMemory", "POLICIES", "admission_order", "fcfs_order", "fits_with_reserve", "lpm_order",
    "FinishReason", "Request", "RequestStatus",
    "ScheduledChunk", "Scheduler", "SchedulerConfig", "SchedulerOutput",
]
