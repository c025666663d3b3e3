"""Mode "old" of bench/scheduler_bench.py: occflow's admission before issue 25.

Then the admission trigger took the lease itself when woken and resumed the task no sooner
than 10 s after its deferral, so the lease was held through that wait and Airflow's resume.
``LeaseTakingTrigger`` is that trigger; ``OldAdmissionWrite`` defers on it (with
``admission_wait_seconds=0`` and a 10 s guard), and the resumed task uses the lease from the
event (``operators.admission.lease_from_event`` still reads such events).
Kept out of the DAG folder's parsing by ``.airflowignore``.
"""

from __future__ import annotations

from typing import Any

from occflow.leases import LeaseRequest, TaskAdmission
from occflow.operators.delta import DeltaWriteOperator
from occflow.triggers.lease import LeaseAdmissionTrigger


class LeaseTakingTrigger(LeaseAdmissionTrigger):
    """The admission trigger as it was: it takes the lease when the store grants it."""

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        decided = admission.decide(request)
        return None if decided.lease is None else admission.admitted_event(decided.lease)


class OldAdmissionWrite(DeltaWriteOperator):
    """A delta-rs write admitted as before issue 25: defer at once, on a trigger that takes the lease."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(admission_wait_seconds=0.0, admission_resume_settle_seconds=10.0, **kwargs)

    def defer(self, *, trigger: Any, method_name: str, kwargs: Any = None, timeout: Any = None) -> Any:
        _, fields = trigger.serialize()
        return super().defer(trigger=LeaseTakingTrigger(**fields), method_name=method_name, kwargs=kwargs,
                             timeout=timeout)
