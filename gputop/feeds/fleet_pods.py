"""Pods by name in the fleet view: each process's Kubernetes namespace and pod, from kube-state-metrics.

gputop's exporter labels a process's series ``container`` with the 64-hex container id it read from
``/proc/PID/cgroup`` (``gputop.sources.host``), or, inside a pod's cgroup without a container id, the
pod's UID; the label is empty on the host. kube-state-metrics exports
``kube_pod_container_info{namespace, pod, container, container_id="containerd://<id>"}`` (also
``cri-o://``, ``docker://``; its ``container`` is the container's *name*) and
``kube_pod_info{namespace, pod, uid}``. ``pods_expr`` joins them to gputop's ids in PromQL: the runtime
scheme stripped from ``container_id`` (``label_replace``), the UID copied into ``container``, each kept
only where some gputop process has that id (``and on(container)``), so the answer holds at most a
series per container gputop knows, whatever the size of the cluster. The fleet reader folds it into its
processes' state query (no query more). Without kube-state-metrics the answer is empty: every ``pod`` and
``namespace`` stays None (unknown) and the columns stay hidden.

Names come from another program through Prometheus: they are kept raw (the model's rule; every
display sanitises them) but capped at ``MAX_NAME`` characters (Kubernetes's longest name), and a
container id that two pods claim is unknown rather than a guess. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the longest name Kubernetes allows (a pod's name is a DNS subdomain, at most 253 characters; a
#: namespace at most 63): a longer value is cut there, with "…" as its last character
MAX_NAME = 253

#: a pod's namespace and name
Pod = tuple[str, str]


def pods_expr(selector: str) -> str:
    """PromQL for ``{container, namespace, pod}`` of every container id (and pod UID) that a gputop
    process matching ``selector`` (label matchers, without braces) carries."""
    sel = f"{selector}," if selector else ""
    known = f'group by (container) (gputop_kernel_launches_total{{{sel}container!=""}})'
    by_id = ('max by (container, namespace, pod) (label_replace(kube_pod_container_info{container_id!=""}, '
             '"container", "$1", "container_id", "[^:]+://(.+)"))')
    by_uid = ('max by (container, namespace, pod) (label_replace(kube_pod_info{uid!=""}, "container", "$1", '
              '"uid", "(.+)"))')
    return f"({by_id} and on(container) {known}) or ({by_uid} and on(container) {known})"


def _name(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value if len(value) <= MAX_NAME else value[: MAX_NAME - 1] + "…"


def add_pod(pods: dict[str, Pod | None], m: Mapping[str, Any]) -> None:
    """One series of the answer (its labels) into ``pods`` (``{container id or pod UID: (namespace,
    pod)}``): None where two different pods claim the same id (unknown, not a guess). A series without
    a container, namespace or pod is left out."""
    container, namespace, pod = m.get("container"), _name(m.get("namespace")), _name(m.get("pod"))
    if not isinstance(container, str) or not container or namespace is None or pod is None:
        return
    if container in pods and pods[container] != (namespace, pod):
        pods[container] = None
    else:
        pods[container] = (namespace, pod)

