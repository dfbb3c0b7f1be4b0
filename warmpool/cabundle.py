"""``warmscale ca-bundle``: copy the CA bundle of the self-managed certificates into the webhook
configuration's ``caBundle``, once, with the caller's (an administrator's) credentials.

For the namespaced install (``manifests/overlays/namespaced``): there the controller may not patch the
cluster-scoped MutatingWebhookConfiguration at all (patch cannot be limited to ``caBundle`` by RBAC, and
ValidatingAdmissionPolicies do not apply to webhook configurations, so a grant would let a compromised
controller widen the webhook to every namespace). Run it after the install, and again after a CA rotation
(every ``RENEW_AT`` of the CA's 10 years); until then the webhook's ``failurePolicy: Ignore`` admits pods
unmutated (alert ``WarmscaleWebhookFailingOpen``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys

from warmscale.warmpool.certs import CA_SECRET


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--cert-namespace", default=os.environ.get("POD_NAMESPACE", "warmscale"),
                   help=f"namespace of the install (its Secret {CA_SECRET}, written by the controller)")
    p.add_argument("--webhook-configuration", default="warmscale-webhook",
                   help="the MutatingWebhookConfiguration whose caBundle is set")
    p.add_argument("--wait", type=float, default=0.0,
                   help="seconds to wait for the CA Secret (the controller writes it once it leads)")


async def copy_bundle(args: argparse.Namespace) -> int:
    from kubernetes_asyncio.client.exceptions import ApiException

    from warmscale.warmpool.certs import CertManager, CertSpec
    from warmscale.warmpool.cli import make_api_client

    api = await make_api_client(args.kubeconfig)
    try:
        manager = CertManager(api, CertSpec(namespace=args.cert_namespace),
                              webhook_configuration=args.webhook_configuration)
        deadline = asyncio.get_running_loop().time() + max(0.0, args.wait)
        while True:
            try:
                secret = await manager.core.read_namespaced_secret(CA_SECRET, args.cert_namespace)
                bundle = base64.b64decode((secret.data or {}).get("ca.crt", ""))
            except ApiException as exc:
                if exc.status != 404:
                    raise
                bundle = b""
            if bundle:
                break
            if asyncio.get_running_loop().time() >= deadline:
                print(f"warmscale ca-bundle: Secret {args.cert_namespace}/{CA_SECRET} has no ca.crt yet (the "
                      "controller writes it once it leads; see --wait)", file=sys.stderr)
                return 1
            await asyncio.sleep(1.0)
        if not await manager.patch_ca_bundle(bundle):
            print(f"warmscale ca-bundle: MutatingWebhookConfiguration {args.webhook_configuration} not found",
                  file=sys.stderr)
            return 1
        print(f"caBundle of {args.webhook_configuration} set from {args.cert_namespace}/{CA_SECRET}")
        return 0
    finally:
        await api.close()


def run(args: argparse.Namespace) -> int:
    return asyncio.run(copy_bundle(args))
