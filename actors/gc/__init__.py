"""Garbage collection: dead containers, empty sandboxes and the logs, volumes and cgroups
of pods that are gone every minute (containers.py), unused images every five minutes when
the image filesystem fills up (images.py), run by the gc actor (collector.py). Containers
and sandboxes without io.pykubelet.managed are never touched; images carry no such label,
so image GC weighs every image against every container in the runtime, managed or not.
Which pods still exist comes from the sync loop; the decisions are pods/gc.py's.
"""

from .collector import GarbageCollector, GcMetrics, GcSettings, gc_actor, statvfs_usage

__all__ = ["GarbageCollector", "GcMetrics", "GcSettings", "gc_actor", "statvfs_usage"]
