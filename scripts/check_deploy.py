"""The checks of scripts/check-deploy.sh that kubernetes-validate cannot do.

    check_deploy.py crds FILE...   custom resources (PodMonitor) against the
                                   Prometheus Operator's CRD schema
    check_deploy.py drift          the Kubernetes copies of the collector
                                   config and join.yaml match their sources
    check_deploy.py configs DIR    writes every tokentap tap config of the
                                   deployment to DIR, for `tokentap validate`

Runs in the project venv (.venv): PyYAML and the pydantic models of
cloudcoil-models-prometheus-operator (tests/py/requirements.txt).
"""

import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def k8s_docs():
    for path in sorted(K8S.glob("*.yaml")):
        for d in docs(path):
            yield path, d


def paths(value, prefix=""):
    """Every key path in a YAML value (list items by index)."""
    if isinstance(value, dict):
        for k, v in value.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            yield p
            yield from paths(v, p)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, f"{prefix}[{i}]")


def crd_models():
    # The operator's CRD openAPIV3Schema as pydantic models: types, enums,
    # patterns and required fields are checked on validation.
    from cloudcoil.models.prometheus_operator import v1

    return {("monitoring.coreos.com/v1", "PodMonitor"): v1.PodMonitor}


def check_crds(files):
    models = crd_models()
    failed = checked = 0
    for path in files:
        for d in docs(path):
            # Any other kind is kubernetes-validate's, which fails on every
            # kind it has no schema for but these (check-deploy.sh).
            model = models.get((d.get("apiVersion"), d.get("kind")))
            if model is None:
                continue
            name = f"{path}: {d['kind']}/{d.get('metadata', {}).get('name')}"
            try:
                obj = model.model_validate(d)
            except Exception as e:  # pydantic.ValidationError: every error with its path
                print(f"ERROR {name}: {e}")
                failed += 1
                continue
            # The models ignore unknown keys (the API server prunes them): a
            # key that does not come back is one the schema does not have,
            # i.e. a typo. This makes the check strict, like --strict.
            back = set(paths(obj.model_dump(by_alias=True, exclude_unset=True, mode="json")))
            unknown = [p for p in paths(d) if p not in back]
            if unknown:
                print(f"ERROR {name}: unknown fields: {', '.join(unknown)}")
                failed += 1
                continue
            checked += 1
            print(f"INFO {name} passed against the prometheus-operator CRD schema (strict)")
    return failed, checked


def configmap(name, key):
    for path, d in k8s_docs():
        if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name:
            return path.relative_to(ROOT), yaml.safe_load(d["data"][key])
    raise SystemExit(f"ERROR deploy/kubernetes: no ConfigMap {name} with {key}")


def check_drift():
    failed = 0
    src = yaml.safe_load((ROOT / "deploy" / "otel-collector-fleet.yaml").read_text())
    path, k8s = configmap("otel-collector", "config.yaml")
    lb = k8s.get("exporters", {}).get("loadbalancing", {})
    if set(lb.get("resolver", {})) != {"k8s"}:
        print(f"ERROR {path}: the collector's resolver must be k8s only, not {sorted(lb.get('resolver', {}))}")
        failed += 1
    for c in (src, k8s):
        c.get("exporters", {}).get("loadbalancing", {}).pop("resolver", None)
    if src != k8s:
        print(f"ERROR {path}: ConfigMap otel-collector differs from deploy/otel-collector-fleet.yaml beyond the resolver")
        failed += 1
    else:
        print(f"INFO {path}: collector config = deploy/otel-collector-fleet.yaml with the k8s resolver")
    join = yaml.safe_load((ROOT / "config" / "fleet" / "join.yaml").read_text())
    path, k8s = configmap("tokentap-join", "join.yaml")
    if join != k8s:
        print(f"ERROR {path}: ConfigMap tokentap-join differs from config/fleet/join.yaml")
        failed += 1
    else:
        print(f"INFO {path}: join.yaml = config/fleet/join.yaml")
    return failed


# Compose service names resolve only inside the compose network; `tokentap
# validate` resolves upstreams and engines, so they become loopback (as
# it::dashboards does for config/compose.yaml).
HOST = re.compile(r"(https?://)[A-Za-z][A-Za-z0-9.-]*:")


def write_configs(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in sorted((ROOT / "config" / "fleet").glob("*.yaml")):
        text = src.read_text()
        if "taps" not in (yaml.safe_load(text) or {}):
            continue  # join.yaml: not a tap config
        dst = out / f"fleet-{src.name}"
        dst.write_text(HOST.sub(r"\g<1>127.0.0.1:", text))
        written.append((src.relative_to(ROOT), dst))
    for path, d in k8s_docs():
        if d.get("kind") != "ConfigMap":
            continue
        for key, text in (d.get("data") or {}).items():
            if key.endswith(".yaml") and "taps" in (yaml.safe_load(text) or {}):
                dst = out / f"k8s-{d['metadata']['name']}-{key}"
                dst.write_text(text)
                written.append((f"{path.relative_to(ROOT)} ConfigMap {d['metadata']['name']}", dst))
    for src, dst in written:
        print(f"{dst}\t{src}")


def main(argv):
    if len(argv) >= 2 and argv[1] == "crds":
        failed, checked = check_crds(argv[2:])
        if not failed and not checked:
            print("ERROR no custom resource found to check")
            failed = 1
        return 1 if failed else 0
    if argv[1:] == ["drift"]:
        return 1 if check_drift() else 0
    if len(argv) == 3 and argv[1] == "configs":
        write_configs(argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
