"""What the driver's REST API (``/api/v1/applications/<id>/...``) says about a streaming
query's micro-batches: the jobs and stages of each batch, and what their tasks did.

Spark names a streaming job ``<query name>\\nid = <query id>\\nrunId = ...\\nbatch = <n>``; a
restart from another checkpoint keeps the name and the batch numbers, not the id, so both
are matched. The UI keeps the last ``spark.ui.retainedJobs`` / ``retainedStages`` (1,000
each by default): older batches are left out.

- :func:`batch_memory` -- per batch, the execution memory its tasks took and what they spilled;
  :func:`memory_pool_bytes` -- the executors' memory pool that execution memory comes from.
- :func:`last_stage_tasks` -- per batch, the tasks of its stateful stage;
  :func:`stateful_executors` -- the executors that ran them.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

__all__ = ["batch_jobs", "batch_memory", "get", "last_stage_tasks", "memory_pool_bytes", "stateful_executors"]


def get(url: str) -> Any:
    """The JSON at ``url`` (the driver's own UI)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the driver's own UI
        return json.load(response)


def _base(spark) -> str:
    sc = spark.sparkContext
    return f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"


def batch_jobs(spark, query_name: str, query_id: str) -> dict[int, list[dict]]:
    """The Spark jobs of each batch of the query named ``query_name`` with id ``query_id``."""
    out: dict[int, list[dict]] = {}
    for job in get(f"{_base(spark)}/jobs"):
        lines = (job.get("description") or "").splitlines()
        if lines[:2] != [query_name, f"id = {query_id}"] or not lines[-1].startswith("batch = "):
            continue
        out.setdefault(int(lines[-1].split("=")[1]), []).append(job)
    return out


def batch_memory(spark, query_name: str, query_id: str) -> dict[int, dict[str, int]]:
    """Per batch (see :func:`batch_jobs`): ``peak_execution_bytes`` (the largest stage's peak
    execution memory, summed over its tasks: the sort and aggregation buffers that grow with a
    batch) and ``spilled_bytes`` (what its stages spilled to disk because those buffers did
    not fit)."""
    stages = {s["stageId"]: s for s in get(f"{_base(spark)}/stages") if s.get("status") == "COMPLETE"}
    out: dict[int, dict[str, int]] = {}
    for batch, jobs in batch_jobs(spark, query_name, query_id).items():
        mine = [stages[s] for job in jobs for s in job.get("stageIds", []) if s in stages]
        out[batch] = {
            "peak_execution_bytes": max([0, *(s.get("peakExecutionMemory", 0) for s in mine)]),
            "spilled_bytes": sum(s.get("memoryBytesSpilled", 0) for s in mine),
        }
    return out


def memory_pool_bytes(spark) -> int:
    """The executors' unified memory pools, summed (``maxMemory`` of every executor but the
    driver): (heap - 300 MB) x ``spark.memory.fraction``, shared by execution (sorts,
    aggregations) and cached blocks. A batch whose execution memory outgrows its executor's
    pool spills to disk; one that cannot spill fails with an out-of-memory error."""
    return sum(int(e.get("maxMemory", 0)) for e in get(f"{_base(spark)}/executors") if e.get("id") != "driver")


def last_stage_tasks(spark, query_name: str, query_id: str) -> dict[int, list[dict]]:
    """Per batch (see :func:`batch_jobs`), the successful tasks of its last stage, the one with
    the stateful operator and the sink (the stages before it read Kafka and shuffle), in task
    order, as the REST API gives them (``executorId``, ``taskMetrics``, ...)."""
    stages = {s["stageId"]: s for s in get(f"{_base(spark)}/stages?details=true") if s.get("status") == "COMPLETE"}
    out: dict[int, list[dict]] = {}
    for batch, jobs in batch_jobs(spark, query_name, query_id).items():
        ids = [s for job in jobs for s in job.get("stageIds", []) if s in stages]
        if ids:
            tasks = sorted((stages[max(ids)].get("tasks") or {}).values(), key=lambda t: t.get("index", 0))
            out[batch] = [t for t in tasks if t.get("status") == "SUCCESS"]
    return out


def stateful_executors(spark, query_name: str, query_id: str) -> dict[int, list[str]]:
    """Per batch, the executor ids that ran its stateful stage (:func:`last_stage_tasks`), one id
    per task. One id for a batch's two state partitions means they ran one after the other on
    one core."""
    return {
        batch: [str(t["executorId"]) for t in tasks] for batch, tasks in last_stage_tasks(spark, query_name, query_id).items()
    }
