#!/usr/bin/env python3
"""Cross-file checks that schema validation cannot see.

usage: check_deploy_refs.py REPO_ROOT

Schemas say each file is well-formed; they do not say that a Service selects
the Deployment's pods, that a named port exists, that LEASEHOLD_REDIS_URL is
not misspelt (a typo silently falls back to the embedded single-node store),
or that the termination grace period covers the longest wait. This does, for:
  * k8s/kustomization.yaml and every overlay under k8s/overlays/ (resources are
    followed like kustomize does for plain files and directories; no kubectl
    needed), plus k8s/optional/*.yaml against the base;
  * docker-compose.yml;
  * Dockerfile ENV lines.
Needs PyYAML (the tools venv has it).
"""

from __future__ import annotations

import os
import re
import sys

import yaml

# The LEASEHOLD_* settings the binary really reads: every `env = "..."` in
# src/config/ (one file per component's settings), so a new setting needs no
# second list here.
_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "config")
KNOWN_ENV: set[str] = set()
for _name in sorted(os.listdir(_CONFIG_DIR)):
    if _name.endswith(".rs"):
        with open(os.path.join(_CONFIG_DIR, _name), encoding="utf-8") as _f:
            KNOWN_ENV |= set(re.findall(r'env = "(LEASEHOLD_[A-Z0-9_]+)"', _f.read()))
if len(KNOWN_ENV) < 10:
    sys.exit(f"check_deploy_refs: found only {len(KNOWN_ENV)} settings in {_CONFIG_DIR}")
DEFAULT_MAX_WAIT_MS = 30000
DEFAULT_GRACE_MS = 10000

problems: list[str] = []


def fail(msg: str) -> None:
    problems.append(msg)


def load_docs(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def render(kdir: str, seen: set[str] | None = None) -> list[dict]:
    """Objects of a kustomization built only from plain resources."""
    seen = seen or set()
    kdir = os.path.normpath(kdir)
    if kdir in seen:
        fail(f"{kdir}: kustomization cycle")
        return []
    seen.add(kdir)
    kfile = os.path.join(kdir, "kustomization.yaml")
    k = load_docs(kfile)[0]
    for unsupported in ("patches", "patchesStrategicMerge", "patchesJson6902", "components",
                        "configMapGenerator", "secretGenerator", "replacements"):
        if unsupported in k:
            fail(f"{kfile}: uses {unsupported}; teach check_deploy_refs.py about it")
    objs: list[dict] = []
    for res in k.get("resources", []):
        p = os.path.join(kdir, res)
        if os.path.isdir(p):
            objs += render(p, seen)
        elif os.path.isfile(p):
            objs += load_docs(p)
        else:
            fail(f"{kfile}: resource {res!r} does not exist")
    return objs


def labels_match(selector: dict, labels: dict) -> bool:
    ml = (selector or {}).get("matchLabels", selector or {})
    return bool(ml) and all(labels.get(k) == v for k, v in ml.items())


def byname(objs, kind):
    return {o["metadata"]["name"]: o for o in objs if o.get("kind") == kind}


def secs_from_ms(value, default_ms):
    try:
        return int(value) / 1000.0
    except (TypeError, ValueError):
        return default_ms / 1000.0


def check_env_names(where: str, names) -> None:
    for n in names:
        if n.startswith("LEASEHOLD_") and n not in KNOWN_ENV:
            fail(f"{where}: {n} is not a leasehold setting (typo?)")


def check_k8s(name: str, objs: list[dict], optional: list[dict]) -> None:
    deployments = byname(objs, "Deployment")
    services = byname(objs, "Service")
    configmaps = byname(objs, "ConfigMap")
    names = [(o.get("kind"), o["metadata"]["name"]) for o in objs]
    for dup in {x for x in names if names.count(x) > 1}:
        fail(f"{name}: duplicate {dup[0]}/{dup[1]}")

    lh = deployments.get("leasehold")
    if not lh:
        fail(f"{name}: no Deployment 'leasehold'")
        return
    pod = lh["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})
    spec = pod["spec"]
    if not labels_match(lh["spec"]["selector"], pod_labels):
        fail(f"{name}: Deployment selector does not match its pod labels")

    # hardening the issue asks for
    psc = spec.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        fail(f"{name}: pod securityContext.runAsNonRoot must be true")
    if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(f"{name}: pod seccompProfile must be RuntimeDefault")
    if not (spec.get("topologySpreadConstraints") or spec.get("affinity", {}).get("podAntiAffinity")):
        fail(f"{name}: no topologySpreadConstraints or podAntiAffinity")
    container = next((c for c in spec["containers"] if c["name"] == "leasehold"), None)
    if not container:
        fail(f"{name}: no container 'leasehold'")
        return
    csc = container.get("securityContext", {})
    if csc.get("readOnlyRootFilesystem") is not True:
        fail(f"{name}: readOnlyRootFilesystem must be true")
    if csc.get("allowPrivilegeEscalation") is not False:
        fail(f"{name}: allowPrivilegeEscalation must be false")
    if csc.get("capabilities", {}).get("drop") != ["ALL"]:
        fail(f"{name}: capabilities must drop ALL")
    for probe, path in (("startupProbe", None), ("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        p = container.get(probe)
        if not p:
            fail(f"{name}: {probe} missing")
        elif path and p.get("httpGet", {}).get("path") != path:
            fail(f"{name}: {probe} should GET {path}")
    pre = container.get("lifecycle", {}).get("preStop", {})
    if "exec" in pre:
        fail(f"{name}: preStop exec needs a shell/binary in the image; use sleep or httpGet")
    for res in ("requests", "limits"):
        if not container.get("resources", {}).get(res):
            fail(f"{name}: resources.{res} missing")

    ports = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    port_numbers = set(ports.values())

    env = {}
    for ef in container.get("envFrom", []):
        ref = ef.get("configMapRef", {}).get("name")
        if ref:
            if ref not in configmaps:
                fail(f"{name}: envFrom configMap {ref!r} not defined")
            else:
                env.update(configmaps[ref].get("data", {}))
    for e in container.get("env", []):
        env[e["name"]] = e.get("value")
    check_env_names(f"{name}: container env", env)
    if not env.get("LEASEHOLD_REDIS_URL"):
        fail(f"{name}: LEASEHOLD_REDIS_URL unset: {lh['spec'].get('replicas')} replicas would each use "
             "their own embedded store")
    for key, want in (("LEASEHOLD_LISTEN", 8080), ("LEASEHOLD_METRICS_LISTEN", 9090)):
        m = re.fullmatch(r"0\.0\.0\.0:(\d+)", str(env.get(key, "")))
        if not m:
            fail(f"{name}: {key} must listen on 0.0.0.0 inside the pod")
        elif int(m.group(1)) not in port_numbers or int(m.group(1)) != want:
            fail(f"{name}: {key} port {m.group(1)} is not the declared container port {want}")
    pw_file = env.get("LEASEHOLD_REDIS_PASSWORD_FILE")
    if pw_file:
        mounts = [vm["mountPath"].rstrip("/") for vm in container.get("volumeMounts", [])]
        if os.path.dirname(pw_file) not in mounts:
            fail(f"{name}: LEASEHOLD_REDIS_PASSWORD_FILE {pw_file} is not under a volume mount")

    # shutdown budget: preStop + longest wait + drain grace must fit
    grace = spec.get("terminationGracePeriodSeconds", 30)
    pre_sleep = pre.get("sleep", {}).get("seconds", 0)
    need = (pre_sleep + secs_from_ms(env.get("LEASEHOLD_MAX_WAIT_MS"), DEFAULT_MAX_WAIT_MS)
            + secs_from_ms(env.get("LEASEHOLD_SHUTDOWN_GRACE_MS"), DEFAULT_GRACE_MS))
    if not grace > need:
        fail(f"{name}: terminationGracePeriodSeconds {grace} must exceed preStop {pre_sleep}s + "
             f"max wait + shutdown grace = {need:g}s")

    # Service -> pods, ports
    svc = services.get("leasehold")
    if not svc:
        fail(f"{name}: no Service 'leasehold'")
    else:
        if not labels_match(svc["spec"]["selector"], pod_labels):
            fail(f"{name}: Service leasehold does not select the leasehold pods")
        for p in svc["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            if (isinstance(tp, str) and tp not in ports) or (isinstance(tp, int) and tp not in port_numbers):
                fail(f"{name}: Service port {p.get('name')} targets unknown container port {tp!r}")

    for o in objs:
        kind, oname = o.get("kind"), o["metadata"]["name"]
        if kind == "PodDisruptionBudget" and not labels_match(o["spec"]["selector"], pod_labels):
            fail(f"{name}: PDB {oname} selects no leasehold pod")
        if kind == "HorizontalPodAutoscaler":
            t = o["spec"]["scaleTargetRef"]
            if t["kind"] != "Deployment" or t["name"] not in deployments:
                fail(f"{name}: HPA {oname} targets missing {t['kind']}/{t['name']}")
            if o["spec"].get("minReplicas", 1) < 2:
                fail(f"{name}: HPA {oname} minReplicas below 2 defeats the PDB")
        if kind == "NetworkPolicy" and labels_match(o["spec"]["podSelector"], pod_labels):
            for rule in o["spec"].get("ingress", []):
                for p in rule.get("ports", []):
                    if isinstance(p.get("port"), str) and p["port"] not in ports:
                        fail(f"{name}: NetworkPolicy {oname} names unknown port {p['port']!r}")
    sa = spec.get("serviceAccountName")
    if sa and sa not in byname(objs, "ServiceAccount"):
        fail(f"{name}: serviceAccountName {sa!r} not defined")

    redis_host = re.match(r"rediss?://(?:[^@/]*@)?([^:/]+)", env.get("LEASEHOLD_REDIS_URL", "") or "")
    if name.endswith("try-redis") and redis_host and redis_host.group(1) not in services:
        fail(f"{name}: LEASEHOLD_REDIS_URL host {redis_host.group(1)!r} has no Service in this overlay")

    for sm in optional:
        if sm.get("kind") != "ServiceMonitor":
            continue
        svc_ports = {p.get("name") for p in (svc or {}).get("spec", {}).get("ports", [])}
        if not svc or not labels_match(sm["spec"]["selector"], svc["metadata"].get("labels", {})):
            fail(f"{name}: ServiceMonitor {sm['metadata']['name']} selects no leasehold Service")
        for ep in sm["spec"]["endpoints"]:
            if ep.get("port") and ep["port"] not in svc_ports:
                fail(f"{name}: ServiceMonitor port {ep['port']!r} is not a Service port name")


def parse_duration(s) -> float:
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(s)):
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    return total


def check_compose(path: str) -> None:
    c = load_docs(path)[0]
    services = c.get("services", {})
    for sname, s in services.items():
        for port in s.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                fail(f"{path}: {sname} publishes {port!r} beyond 127.0.0.1")
        deps = s.get("depends_on", {})
        if isinstance(deps, list):
            fail(f"{path}: {sname} depends_on without condition: service_healthy")
            deps = {}
        for dep, cond in deps.items():
            if dep not in services:
                fail(f"{path}: {sname} depends on unknown service {dep}")
            elif cond.get("condition") != "service_healthy":
                fail(f"{path}: {sname} -> {dep} should wait for service_healthy")
            elif not services[dep].get("healthcheck"):
                fail(f"{path}: {sname} waits for {dep} to be healthy but {dep} has no healthcheck")
    lh = services.get("leasehold")
    if not lh:
        fail(f"{path}: no service 'leasehold'")
        return
    env = lh.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    check_env_names(f"{path}: leasehold.environment", env)
    m = re.match(r"rediss?://(?:[^@/]*@)?([^:/]+)", str(env.get("LEASEHOLD_REDIS_URL", "")))
    if m and m.group(1) not in services:
        fail(f"{path}: LEASEHOLD_REDIS_URL host {m.group(1)!r} is not a compose service")
    hc = lh.get("healthcheck", {}).get("test", [])
    if not (isinstance(hc, list) and hc[:1] == ["CMD"] and "healthcheck" in hc):
        fail(f"{path}: leasehold healthcheck must be exec form ['CMD', .../leasehold, 'healthcheck'] (no shell)")
    need = (secs_from_ms(env.get("LEASEHOLD_MAX_WAIT_MS"), DEFAULT_MAX_WAIT_MS)
            + secs_from_ms(env.get("LEASEHOLD_SHUTDOWN_GRACE_MS"), DEFAULT_GRACE_MS))
    if not parse_duration(lh.get("stop_grace_period", "10s")) > need:
        fail(f"{path}: leasehold stop_grace_period must exceed max wait + shutdown grace ({need:g}s)")


def check_dockerfile(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    envs = set()
    for line in text.splitlines():
        if line.strip().upper().startswith("ENV "):
            envs |= set(re.findall(r"(LEASEHOLD_[A-Z0-9_]+)=", line))
    check_env_names(path, envs)
    if not re.search(r'^HEALTHCHECK .*CMD \[".*leasehold", "healthcheck"', text, re.M):
        fail(f"{path}: HEALTHCHECK must be exec form running `leasehold healthcheck`")
    if not re.search(r"^USER \d+(:\d+)?\s*$", text, re.M):
        fail(f"{path}: USER must be a numeric non-root uid (runAsNonRoot verifies numerically)")
    if not re.search(r"^EXPOSE 8080 9090\s*$", text, re.M):
        fail(f"{path}: EXPOSE 8080 9090 expected")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = argv[1]
    k8s = os.path.join(root, "k8s")
    optional = []
    opt_dir = os.path.join(k8s, "optional")
    if os.path.isdir(opt_dir):
        for f in sorted(os.listdir(opt_dir)):
            if f.endswith((".yaml", ".yml")):
                optional += load_docs(os.path.join(opt_dir, f))
    targets = [("k8s", k8s)]
    ov = os.path.join(k8s, "overlays")
    if os.path.isdir(ov):
        targets += [(f"k8s/overlays/{d}", os.path.join(ov, d)) for d in sorted(os.listdir(ov))]
    for name, d in targets:
        check_k8s(name, render(d), optional)
    check_compose(os.path.join(root, "docker-compose.yml"))
    check_dockerfile(os.path.join(root, "Dockerfile"))
    for p in problems:
        print(f"check_deploy_refs: {p}", file=sys.stderr)
    if problems:
        print(f"check_deploy_refs: FAIL: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_deploy_refs: ok: {', '.join(n for n, _ in targets)}, docker-compose.yml, Dockerfile")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
