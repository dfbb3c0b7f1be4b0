"""The warm-pool controller's RBAC and node-write admission policy, generated from one table (pure).

Every rule below is a request the controller (or its webhook) actually makes; the audit test
(``tests/faults/test_rbac_audit.py``) runs the controller under these rules, records every request
in the apiserver's audit log and checks both directions: nothing it does is denied, nothing granted
goes unused.

Two modes:

* **cluster-wide** (default install, ``manifests/warmpool/rbac.yaml``): one ClusterRole with the
  workload rules for every namespace.
* **namespaced** (``warmscale warmpool --namespace NS[,NS...]``): a Role + RoleBinding per watched
  namespace; only what is cluster-scoped by nature stays in a ClusterRole (reading/watching nodes and
  patching their labels, reading the placeholder PriorityClass). The Lease goes to the first watched
  namespace.
  ``warmscale rbac --namespace NS`` prints it (``manifests/overlays/namespaced/`` is generated so).

Node writes are further limited by a ValidatingAdmissionPolicy: the controller's ServiceAccount may
only add, change or remove ``warmscale.io/staged-*`` labels and annotations on nodes; any other
label, annotation, taint or spec change is denied (:func:`node_write_policy`).

The hold gateway (``warmscale hold-gateway --service NAME``, scaler/holdgate_cli.py) runs in the workload's
namespace with its own ServiceAccount; its one rule (:data:`HOLD_GATEWAY_RULES`: list and watch the
Service's EndpointSlices) is a Role there: ``warmscale rbac --hold-gateway NS`` prints it
(``manifests/examples/hold-gateway/rbac.yaml`` is generated so).

``python -m warmscale.warmpool.rbac [--namespace NS ...] [--install-namespace NS]`` prints the manifests.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from warmscale.warmpool.objects import MANAGED_BY, MANAGED_BY_VALUE, PRIORITY_CLASS, STAGED_PREFIX

NAME = "warmscale-warmpool"
LEASE_NAME = "warmscale-warmpool"
INSTALL_NAMESPACE = "warmscale"
LABELS = {MANAGED_BY: MANAGED_BY_VALUE}
Rule = dict[str, Any]

# The hot tier's (docs/hot-tier.md, "Placement"), in the same roles.
HOT_WORKLOAD_RULES: tuple[tuple[str, Rule], ...] = (
    ("the hot tier: the shared ResourceClaims of the pool GPUs (one per namespace and GPU, labelled "
     "warmscale's; only those are deleted); its sleeper pods are covered by the pods rule",
     {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list", "create", "delete"]}),
)
HOT_CLUSTER_RULES: tuple[tuple[str, Rule], ...] = (
    ("the hot tier: the pool GPUs the DRA driver publishes (read only)",
     {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}),
)
# In the workloads' namespaces (a ClusterRole in cluster-wide mode).
WORKLOAD_RULES: tuple[tuple[str, Rule], ...] = (
    ("annotated workloads: watch them; patch the status annotation, the clean-up finalizer and (without a "
     "ScaledObject) spec.replicas up to the floor",
     {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["list", "watch", "patch"]}),
    ("annotated LeaderWorkerSets (one replica = one group): the same as Deployments",
     {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"],
      "verbs": ["list", "watch", "patch"]}),
    ("Volcano PodGroups of placeholder gangs (workloads with schedulerName: volcano): one per gang, all or "
     "nothing",
     {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["list", "watch", "create",
                                                                                    "delete"]}),
    ("annotated RayClusters (a worker group as the target): watch them; patch the status annotation and the "
     "clean-up finalizer (never their replicas: KubeRay and the Ray autoscaler own those)",
     {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "watch", "patch"]}),
    ("placeholder and pre-pull pods (all pods watched for time-to-ready); patch: the pod-deletion-cost "
     "annotation on managed Deployments' ready pods (the least loaded goes first on scale-in)",
     {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "create", "delete", "patch"]}),
    ("staging Jobs and cache evict Jobs",
     {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch", "create", "delete"]}),
    ("Events on workloads (InvalidAnnotation, Staged, ...)",
     {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}),
    ("the workload's own ScaledObject (warmscale.io/autoscale)",
     {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["get", "create", "patch", "delete"]}),
    *HOT_WORKLOAD_RULES,
    ("a workload in a Kueue queue (label kueue.x-k8s.io/queue-name): read its LocalQueue (which ClusterQueue)",
     {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]}),
)
# Cluster-scoped by nature (a ClusterRole in both modes).
CLUSTER_RULES: tuple[tuple[str, Rule], ...] = (
    ("nodes: match them; label/annotate warmscale.io/staged-<hash> after staging, remove stale ones (the "
     "ValidatingAdmissionPolicy warmscale-warmpool-node-writes allows nothing else)",
     {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch", "patch"]}),
    ("the placeholders' PriorityClass is shipped with the install: read it only",
     {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "resourceNames": [PRIORITY_CLASS],
      "verbs": ["get"]}),
    *HOT_CLUSTER_RULES,
    ("a workload in a Kueue queue: read its ClusterQueue's nominal GPU quota (the quota-below-floor Event)",
     {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get"]}),
)
# In the Lease's namespace.
LEASE_RULES: tuple[tuple[str, Rule], ...] = (
    ("leader election: create the Lease once", {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                               "verbs": ["create"]}),
    ("leader election: only its own Lease", {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                            "resourceNames": [LEASE_NAME], "verbs": ["get", "update"]}),
)


# The hold gateway's (scaler/endpointslices.py): read only, in the workload's namespace.
HOLD_GATEWAY_NAME = "warmscale-hold-gateway"
HOLD_GATEWAY_RULES: tuple[tuple[str, Rule], ...] = (
    ("the hold gateway's own replicas: the ready endpoints of the workload's Service (list, then watch)",
     {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}),
)


def hold_gateway(namespace: str, sa: str = HOLD_GATEWAY_NAME, service_account: bool = True) -> list[dict[str, Any]]:
    """The hold gateway's ServiceAccount, Role and RoleBinding, all in the workload's ``namespace``."""
    out: list[dict[str, Any]] = []
    if service_account:
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, namespace)})
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(sa, namespace),
                "rules": _rules(HOLD_GATEWAY_RULES)})
    out.append(_binding("RoleBinding", sa, "Role", sa, namespace, sa, namespace))
    return out


def service_account_user(install_ns: str = INSTALL_NAMESPACE, sa: str = NAME) -> str:
    return f"system:serviceaccount:{install_ns}:{sa}"


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name}
    if namespace:
        m["namespace"] = namespace
    m["labels"] = dict(LABELS)
    return m


def _rules(rules: Sequence[tuple[str, Rule]]) -> list[Rule]:
    return [dict(r) for _, r in rules]


def _subject(install_ns: str, sa: str) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": sa, "namespace": install_ns}]


def _binding(kind: str, name: str, role_kind: str, role: str, install_ns: str, sa: str,
             namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": _subject(install_ns, sa)}


def render(namespaces: Sequence[str] = (), install_ns: str = INSTALL_NAMESPACE, sa: str = NAME,
           lease_ns: str | None = None, service_account: bool = True) -> list[dict[str, Any]]:
    """RBAC objects: cluster-wide mode when ``namespaces`` is empty, else a Role per namespace.

    ``lease_ns``: namespace of the Lease (default: the install namespace cluster-wide; in namespaced mode
    the first watched namespace, where ``warmscale warmpool --namespace NS[,NS...]`` puts it)."""
    out: list[dict[str, Any]] = []
    if service_account:
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, install_ns)})
    if not namespaces:
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(NAME),
                    "rules": _rules(WORKLOAD_RULES) + _rules(CLUSTER_RULES)})
        out.append(_binding("ClusterRoleBinding", NAME, "ClusterRole", NAME, install_ns, sa))
        lease_ns = lease_ns or install_ns
    else:
        cluster = f"{NAME}-cluster"
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(cluster),
                    "rules": _rules(CLUSTER_RULES)})
        out.append(_binding("ClusterRoleBinding", cluster, "ClusterRole", cluster, install_ns, sa))
        for ns in namespaces:
            out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(NAME, ns),
                        "rules": _rules(WORKLOAD_RULES)})
            out.append(_binding("RoleBinding", NAME, "Role", NAME, install_ns, sa, ns))
        lease_ns = lease_ns or namespaces[0]
    leader = f"{NAME}-leader"
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(leader, lease_ns),
                "rules": _rules(LEASE_RULES)})
    out.append(_binding("RoleBinding", leader, "Role", leader, install_ns, sa, lease_ns))
    return out


def granted(hot: bool = False) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) the rules grant (for the audit test). The hot tier's grants
    (``resourceclaims``, ``resourceslices``) are used only with a store (``--redis-url``) and a hot
    pool: left out unless ``hot`` (the audit's run has no hot pool)."""
    out = set()
    hot_rules = {id(r) for _, r in (*HOT_WORKLOAD_RULES, *HOT_CLUSTER_RULES)}
    for _, r in (*WORKLOAD_RULES, *CLUSTER_RULES, *LEASE_RULES):
        if id(r) in hot_rules and not hot:
            continue
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for v in r["verbs"]:
                    out.add((g, res, v))
    return out


def node_write_policy(user: str | None = None, name: str = f"{NAME}-node-writes") -> list[dict[str, Any]]:
    """ValidatingAdmissionPolicy + binding: ``user`` (the controller's ServiceAccount) may change nothing on a
    node but ``warmscale.io/staged-*`` labels and annotations (spec, taints, other labels/annotations,
    owner references and finalizers must stay as they were)."""
    user = user or service_account_user()
    own = STAGED_PREFIX

    def kept(field: str) -> list[dict[str, str]]:
        new, old = f"variables.new_{field}", f"variables.old_{field}"
        return [
            {"expression": f"{new}.all(k, k.startsWith('{own}') || (k in {old} && {old}[k] == {new}[k]))",
             "message": f"{user} may only add or change {own}* {field} on nodes", "reason": "Forbidden"},
            {"expression": f"{old}.all(k, k.startsWith('{own}') || k in {new})",
             "message": f"{user} may only remove {own}* {field} from nodes", "reason": "Forbidden"},
        ]

    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["nodes"]}]},
            "matchConditions": [{"name": "warmscale-controller",
                                 "expression": f"request.userInfo.username == '{user}'"}],
            "variables": [
                {"name": "new_labels", "expression": "object.metadata.?labels.orValue({})"},
                {"name": "old_labels", "expression": "oldObject.metadata.?labels.orValue({})"},
                {"name": "new_annotations", "expression": "object.metadata.?annotations.orValue({})"},
                {"name": "old_annotations", "expression": "oldObject.metadata.?annotations.orValue({})"},
            ],
            "validations": [
                *kept("labels"), *kept("annotations"),
                {"expression": "has(object.spec) == has(oldObject.spec) && "
                               "(!has(object.spec) || object.spec == oldObject.spec)",
                 "message": f"{user} may not change a node's spec (taints, unschedulable, ...)", "reason": "Forbidden"},
                {"expression": "object.metadata.?ownerReferences.orValue([]) == "
                               "oldObject.metadata.?ownerReferences.orValue([]) && "
                               "object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([])",
                 "message": f"{user} may not change a node's owner references or finalizers", "reason": "Forbidden"},
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def dump(objs: Sequence[dict[str, Any]], header: str) -> str:
    body = "---\n".join(yaml.safe_dump(o, sort_keys=False, width=120) for o in objs)
    return header + body


HEADER = ("# GENERATED by `{cmd}` from warmpool/rbac.py (edit there, regenerate).\n"
          "# Least privilege: every rule is a request the controller makes (tests/faults/test_rbac_audit.py).\n")
GATEWAY_HEADER = ("# GENERATED by `{cmd}` from warmpool/rbac.py (edit there, regenerate).\n"
                  "# Least privilege: the hold gateway runs under exactly these rules "
                  "(tests/gateway/test_hold_gateway_cluster.py).\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="warmscale rbac", description=__doc__.split("\n\n")[0] if __doc__ else None)
    configure(p)
    return run(p.parse_args(argv))


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", action="append", default=[],
                   help="namespaced mode: a Role per watched namespace (repeat or comma-separate, in the order "
                   "given to `warmscale warmpool --namespace`: the Lease goes to the first)")
    p.add_argument("--install-namespace", default=INSTALL_NAMESPACE, help="namespace of the ServiceAccount")
    p.add_argument("--lease-namespace", default=None, help="namespace of the Lease (default: see the module doc)")
    p.add_argument("--no-service-account", action="store_true",
                   help="leave out the ServiceAccount (an overlay on top of the base install, which has it)")
    p.add_argument("--admission-policy", action="store_true",
                   help="print the node-write ValidatingAdmissionPolicy instead of the RBAC")
    p.add_argument("--hold-gateway", default=None, metavar="NAMESPACE",
                   help="print the hold gateway's ServiceAccount and Role in the workload's NAMESPACE instead "
                        "(warmscale hold-gateway --service: list and watch EndpointSlices there)")


def run(args: argparse.Namespace) -> int:
    namespaces = [n for part in args.namespace for n in part.split(",") if n]
    shown = " ".join([*(f"--namespace {n}" for n in namespaces),
                      *([f"--install-namespace {args.install_namespace}"]
                        if args.install_namespace != INSTALL_NAMESPACE else []),
                      *(["--no-service-account"] if args.no_service_account else []),
                      *(["--admission-policy"] if args.admission_policy else []),
                      *([f"--hold-gateway {args.hold_gateway}"] if args.hold_gateway else [])])
    if args.hold_gateway:
        objs = hold_gateway(args.hold_gateway, service_account=not args.no_service_account)
    elif args.admission_policy:
        objs = node_write_policy(service_account_user(args.install_namespace))
    else:
        objs = render(namespaces, args.install_namespace, lease_ns=args.lease_namespace,
                      service_account=not args.no_service_account)
    header = GATEWAY_HEADER if args.hold_gateway else HEADER
    sys.stdout.write(dump(objs, header.format(cmd=f"warmscale rbac {shown}".strip())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
