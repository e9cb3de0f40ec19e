#!/usr/bin/env python3
"""templates/*.yaml (Kubernetes) checked against the custom resources' own schemas.

1. templates/mpijob.yaml is an MPIJob (kubeflow.org/v2beta1) and templates/trainjob.yaml a
   TrainJob (trainer.kubeflow.org/v1alpha1) that the CRDs' openAPIV3Schema accepts as a whole
   object (fixtures: <repo>/../shared/fixtures/k8s, or $RINGRUN_K8S_SCHEMAS).
2. What the API server does beyond jsonschema: a field the schema does not declare is pruned
   (kubectl --validate=strict refuses it), so a misspelt field would silently vanish; list-map keys
   are unique; the TrainJob's CEL rules (x-kubernetes-validations) on the name and numProcPerNode.
3. What the operators' webhooks and ringrun need: the MPI Operator's validation (replica types,
   restart and clean-pod policies, the launcher's one replica, worker pod names as DNS labels), the
   launcher running `ringrun` with no -H/--hostfile/-np (it reads /etc/mpi/hostfile itself),
   workers with GPUs and the launcher with none, slots = GPUs per worker, sshd on the workers,
   a termination grace period longer than ringrun's --grace-period; the commented elastic variant,
   uncommented, is valid too. The TrainJob runs `ringrun` on the torch runtime, sets no PET_*
   variable itself (Trainer refuses them) and runs one rank per GPU.
4. That the checks can fail: broken copies (a string for an integer, a missing required field, an
   unknown field, -np in the launcher, a GPU on the launcher) must each be refused.

Usage: test_templates.py [REPO_ROOT]. One line per check; exit 1 if any fails, 77 (skipped) when
PyYAML or jsonschema cannot be imported (Debian: python3-yaml python3-jsonschema).
"""
import copy
import json
import os
import pathlib
import re
import sys

try:
    import yaml
    import jsonschema
except ImportError as e:
    print(f"SKIP: {e} ({sys.executable}); Debian: apt-get install python3-yaml python3-jsonschema")
    sys.exit(77)

REPO = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
SCHEMAS = pathlib.Path(os.environ.get("RINGRUN_K8S_SCHEMAS") or REPO.parent / "shared" / "fixtures" / "k8s")

# Flags that name hosts or a rank count: in a pod ringrun takes both from the job's own contract.
HOST_FLAGS = ("-H", "--hosts", "--hostfile", "-hostfile", "-np", "--num-proc")
RINGRUN_DEFAULT_GRACE = 10  # ringrun's --grace-period default (README, Options)
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

failures = 0


def report(ok, what, detail=""):
    global failures
    if not ok:
        failures += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""))


def check(what, problems):
    """One line for a list of problems: ok when it is empty."""
    report(not problems, what, "; ".join(problems))


# --- schemas ---------------------------------------------------------------------------------

def format_checker():
    """int32/int64 ranges, as the API server checks them (jsonschema ignores these formats)."""
    fc = jsonschema.FormatChecker(formats=())
    for name, bits in (("int32", 32), ("int64", 64)):
        def in_range(v, bits=bits):
            return not isinstance(v, int) or isinstance(v, bool) or -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)
        fc.checks(name)(in_range)
    return fc


def validator(schema_file):
    schema = json.loads((SCHEMAS / schema_file).read_text())
    # An OpenAPI v3.0 schema object: draft 4's keywords (exclusiveMinimum as a boolean, no $schema).
    return jsonschema.Draft4Validator(schema, format_checker=format_checker())


def schema_errors(v, obj):
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(v.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]


def structural_problems(obj, schema, path=""):
    """Fields the API server would prune (undeclared, no additionalProperties and no
    x-kubernetes-preserve-unknown-fields), and duplicate keys of list-type map/set lists."""
    problems = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return problems
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if path == "metadata" or schema.get("x-kubernetes-embedded-resource"):
            return problems  # ObjectMeta: the API server's own, not the CRD's
        for key, value in obj.items():
            where = f"{path}.{key}" if path else key
            if props and key in props:
                problems += structural_problems(value, props[key], where)
            elif isinstance(extra, dict):
                problems += structural_problems(value, extra, where)
            elif extra is not True:
                problems.append(f"{where}: unknown field (the API server prunes it)")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type in ("map", "set"):
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = set()
            for item in obj:
                k = (tuple(item.get(n) if isinstance(item, dict) else None for n in keys) if list_type == "map"
                     else json.dumps(item, sort_keys=True))
                if k in seen:
                    problems.append(f"{path}: duplicate entry {k} (x-kubernetes-list-type: {list_type})")
                seen.add(k)
        for i, item in enumerate(obj):
            problems += structural_problems(item, schema["items"], f"{path}[{i}]")
    return problems


def load_one(name):
    text = (REPO / "templates" / name).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    report(len(docs) == 1, f"{name}: one YAML document", f"{len(docs)} documents" if len(docs) != 1 else "")
    return text, docs[0] if docs else {}


def expect_refused(what, v, obj, structural=None):
    """A broken copy must be refused: by the schema (a ValidationError), or, where the schema
    cannot see it, by the structural check. A schema that accepts anything fails here."""
    try:
        v.validate(obj)
    except jsonschema.ValidationError as e:
        report(True, f"refused: {what}", f"ValidationError at {'.'.join(map(str, e.absolute_path))}")
        return
    if structural is not None:
        problems = structural_problems(obj, v.schema)
        report(bool(problems), f"refused: {what}",
               ("schema accepts it, unknown-field check: " + problems[0]) if problems else "accepted")
        return
    report(False, f"refused: {what}", "the schema accepted it")


# --- pods and commands ------------------------------------------------------------------------

def gpus(resources):
    """The GPUs a container asks for (any resource name with "gpu", as Trainer counts them)."""
    total = 0
    for section in ("limits", "requests"):
        for name, q in (resources or {}).get(section, {}).items():
            if "gpu" in name.lower():
                try:
                    total = max(total, int(q))
                except (TypeError, ValueError):
                    total = max(total, 1)  # not a whole number: still a GPU request
    return total


def argv(container):
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def ringrun_problems(args, program=("python", "train.py")):
    problems = []
    if not args or os.path.basename(args[0]) != "ringrun":
        return [f"runs {args[:1]}, not ringrun"]
    for a in args:
        if a in HOST_FLAGS or any(a.startswith(f + "=") for f in HOST_FLAGS if f.startswith("--")):
            problems.append(f"passes {a} (the pod's contract gives hosts and ranks)")
    if list(program) != args[-len(program):]:
        problems.append(f"program is not {' '.join(program)}: {' '.join(args)}")
    return problems


def grace_period(args):
    for i, a in enumerate(args):
        if a == "--grace-period" and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith("--grace-period="):
            return int(a.split("=", 1)[1])
    return RINGRUN_DEFAULT_GRACE


def grace_problems(pod_spec, args, where):
    t = pod_spec.get("terminationGracePeriodSeconds")
    if t is None:
        return [f"{where}: terminationGracePeriodSeconds not set"]
    if t <= grace_period(args):
        return [f"{where}: terminationGracePeriodSeconds {t} <= ringrun's --grace-period {grace_period(args)}"]
    return []


# --- MPIJob -------------------------------------------------------------------------------------

def mpijob_semantic_problems(job):
    """The MPI Operator's validation (pkg/apis/kubeflow/validation) and ringrun's needs."""
    problems = []
    spec = job.get("spec", {})
    specs = spec.get("mpiReplicaSpecs", {})
    if set(specs) != {"Launcher", "Worker"}:
        problems.append(f"mpiReplicaSpecs has {sorted(specs)}, not Launcher and Worker")
    launcher, worker = specs.get("Launcher", {}), specs.get("Worker", {})
    if launcher.get("replicas") != 1:
        problems.append("Launcher replicas must be 1")
    if not isinstance(worker.get("replicas"), int) or worker.get("replicas") < 1:
        problems.append("Worker replicas must be at least 1")
    for name, rs in specs.items():
        if rs.get("restartPolicy", "Never") not in ("Never", "OnFailure"):
            problems.append(f"{name} restartPolicy {rs.get('restartPolicy')} (Never or OnFailure)")
    run_policy = spec.get("runPolicy", {})
    if run_policy.get("cleanPodPolicy") not in ("None", "Running", "All"):
        problems.append(f"runPolicy.cleanPodPolicy {run_policy.get('cleanPodPolicy')!r} (None, Running or All)")
    if not isinstance(run_policy.get("backoffLimit"), int) or run_policy["backoffLimit"] < 0:
        problems.append("runPolicy.backoffLimit not set (a number >= 0)")
    if spec.get("launcherCreationPolicy", "AtStartup") not in ("AtStartup", "WaitForWorkersReady"):
        problems.append(f"launcherCreationPolicy {spec.get('launcherCreationPolicy')!r}")
    if spec.get("sshAuthMountPath") != "/root/.ssh":
        problems.append(f"sshAuthMountPath {spec.get('sshAuthMountPath')!r}, not /root/.ssh")
    last_worker = f"{job.get('metadata', {}).get('name', '')}-worker-{max(worker.get('replicas') or 1, 1) - 1}"
    if not DNS1035.match(last_worker) or len(last_worker) > 63:
        problems.append(f"worker pod name {last_worker!r} is not a DNS-1035 label")

    slots = spec.get("slotsPerWorker", 1)
    launcher_pod = launcher.get("template", {}).get("spec", {})
    worker_pod = worker.get("template", {}).get("spec", {})
    launcher_containers = launcher_pod.get("containers", [])
    worker_containers = worker_pod.get("containers", [])
    if not launcher_containers or not worker_containers:
        return problems + ["a replica type has no container"]
    largs = argv(launcher_containers[0])
    problems += [f"launcher: {p}" for p in ringrun_problems(largs)]
    for c in launcher_containers + launcher_pod.get("initContainers", []):
        if gpus(c.get("resources")):
            problems.append(f"launcher container {c.get('name')} asks for {gpus(c.get('resources'))} GPU(s)")
    if gpus(worker_containers[0].get("resources")) != slots:
        problems.append(f"worker GPUs {gpus(worker_containers[0].get('resources'))} != slotsPerWorker {slots}")
    wargs = argv(worker_containers[0])
    if wargs and not wargs[0].endswith("sshd"):  # none: the operator runs /usr/sbin/sshd -De
        problems.append(f"worker runs {wargs[0]}, not sshd")
    if launcher_containers[0].get("image") != worker_containers[0].get("image"):
        problems.append("launcher and workers have different images")
    problems += grace_problems(launcher_pod, largs, "launcher")
    problems += grace_problems(worker_pod, largs, "worker")
    return problems


def commented_command(text):
    """The commented-out `# command:` list under the launcher, uncommented."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)# command:\s*$", line)
        if not m:
            continue
        block = ["command:"]
        for follow in lines[i + 1:]:
            item = re.match(rf"^{m.group(1)}#(\s+- .*)$", follow)
            if not item:
                break
            block.append(item.group(1))
        return yaml.safe_load("\n".join(block))["command"]
    return None


def check_resource(name, job, api_version, kind, schema):
    """The kind, the schema and the fields the API server would prune; returns the validator."""
    check(f"{name}: apiVersion {api_version}, kind {kind}",
          [] if (job.get("apiVersion"), job.get("kind")) == (api_version, kind)
          else [f"{job.get('apiVersion')} {job.get('kind')}"])
    v = validator(schema)
    check(f"{name}: valid against {schema}", schema_errors(v, job))
    check(f"{name}: no field the API server would prune, list keys unique", structural_problems(job, v.schema))
    return v


def test_mpijob():
    name = "mpijob.yaml"
    text, job = load_one(name)
    v = check_resource(name, job, "kubeflow.org/v2beta1", "MPIJob", "mpijob-v2beta1.schema.json")
    check(f"{name}: operator's rules; launcher runs ringrun without -H/--hostfile/-np, no GPU; "
          f"workers run sshd with slotsPerWorker GPUs; grace periods", mpijob_semantic_problems(job))

    command = commented_command(text)
    elastic = copy.deepcopy(job)
    if command is None:
        report(False, f"{name}: commented elastic variant", "no '# command:' block found")
    else:
        launcher = elastic["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        launcher["command"] = command
        problems = ringrun_problems([str(a) for a in command])
        if not {"--min-np", "--max-np"} <= set(map(str, command)):
            problems.append(f"no --min-np/--max-np in {command}")
        check(f"{name}: elastic variant {' '.join(map(str, command))!r} runs ringrun elastic, no -H/-np",
              problems)
        check(f"{name}: elastic variant, uncommented, valid and operator's rules",
              schema_errors(v, elastic) + structural_problems(elastic, v.schema) + mpijob_semantic_problems(elastic))

    # The checks can fail.
    broken = copy.deepcopy(job)
    broken["spec"]["slotsPerWorker"] = "eight"
    expect_refused('MPIJob slotsPerWorker: "eight"', v, broken)
    broken = copy.deepcopy(job)
    broken["spec"]["slotsPerWorker"] = 2 ** 31
    expect_refused("MPIJob slotsPerWorker: 2^31 (int32)", v, broken)
    broken = copy.deepcopy(job)
    del broken["spec"]["mpiReplicaSpecs"]
    expect_refused("MPIJob without mpiReplicaSpecs (required)", v, broken)
    broken = copy.deepcopy(job)
    broken["spec"]["slotsPerWorkers"] = 8
    expect_refused("MPIJob unknown field spec.slotsPerWorkers", v, broken, structural=True)
    broken = copy.deepcopy(job)
    broken["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resource"] = {}
    expect_refused("MPIJob unknown field in a worker container (resource)", v, broken, structural=True)
    broken = copy.deepcopy(job)
    c = broken["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    c["command"] = ["ringrun", "-np", "32", "python", "train.py"]
    c.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = 1
    problems = mpijob_semantic_problems(broken)
    report(any("-np" in p for p in problems) and any("GPU" in p for p in problems),
           "refused: launcher with -np 32 and a GPU", "; ".join(problems))


# --- TrainJob -----------------------------------------------------------------------------------

def trainjob_semantic_problems(job):
    problems = []
    name = job.get("metadata", {}).get("name", "")
    # The CRD's CEL rules, which jsonschema does not run.
    if not DNS1035.match(name) or len(name) > 63:
        problems.append(f"metadata.name {name!r}: RFC 1035 label of at most 63 characters")
    spec = job.get("spec", {})
    ref = spec.get("runtimeRef", {})
    if (ref.get("name"), ref.get("kind", "ClusterTrainingRuntime")) != ("torch-distributed", "ClusterTrainingRuntime"):
        problems.append(f"runtimeRef {ref}: not the ClusterTrainingRuntime torch-distributed")
    trainer = spec.get("trainer", {})
    nproc = trainer.get("numProcPerNode")
    if nproc is not None and (not isinstance(nproc, int) or nproc < 1):
        problems.append(f"numProcPerNode {nproc!r}: must be >= 1")
    if not isinstance(trainer.get("numNodes"), int) or trainer["numNodes"] < 1:
        problems.append(f"numNodes {trainer.get('numNodes')!r}")
    args = [str(a) for a in (trainer.get("command") or []) + (trainer.get("args") or [])]
    problems += [f"trainer: {p}" for p in ringrun_problems(args)]
    reserved = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
    for e in trainer.get("env", []):
        if e.get("name") in reserved:
            problems.append(f"trainer.env sets {e['name']} (the torch runtime's; Trainer refuses it)")
    g = gpus(trainer.get("resourcesPerNode"))
    if g < 1:
        problems.append("resourcesPerNode asks for no GPU")
    elif nproc is not None and nproc != g:
        problems.append(f"numProcPerNode {nproc} != GPUs per node {g}")
    pods = [rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            for p in spec.get("runtimePatches", [])
            for rj in p.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
            if rj.get("name") == "node"]
    if not pods:
        problems.append("no runtimePatches entry for replicatedJob node (terminationGracePeriodSeconds)")
    for pod in pods:
        problems += grace_problems(pod, args, "node pods")
    return problems


def test_trainjob():
    name = "trainjob.yaml"
    _, job = load_one(name)
    v = check_resource(name, job, "trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjob-v1alpha1.schema.json")
    check(f"{name}: CEL rules; torch-distributed runtime; trainer runs ringrun without -H/-np, "
          f"no PET_* set, one rank per GPU; grace period", trainjob_semantic_problems(job))

    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["numNodes"] = "three"
    expect_refused('TrainJob numNodes: "three"', v, broken)
    broken = copy.deepcopy(job)
    del broken["spec"]["runtimeRef"]["name"]
    expect_refused("TrainJob runtimeRef without name (required)", v, broken)
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "eight"
    expect_refused('TrainJob nvidia.com/gpu: "eight" (not a quantity)', v, broken)
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["numProcsPerNode"] = 8
    expect_refused("TrainJob unknown field spec.trainer.numProcsPerNode", v, broken, structural=True)
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "3"}]
    broken["spec"]["trainer"]["numProcPerNode"] = 0
    problems = trainjob_semantic_problems(broken)
    report(any("PET_NNODES" in p for p in problems) and any(">= 1" in p for p in problems),
           "refused: TrainJob setting PET_NNODES, numProcPerNode 0", "; ".join(problems))


def main():
    try:
        from importlib.metadata import version
        jsonschema_version = version("jsonschema")
    except Exception:
        jsonschema_version = "?"
    print(f"python {sys.version.split()[0]} ({sys.executable}), PyYAML {yaml.__version__}, "
          f"jsonschema {jsonschema_version}; schemas {SCHEMAS}")
    if not SCHEMAS.is_dir():
        report(False, "schema folder", f"{SCHEMAS} not found (set RINGRUN_K8S_SCHEMAS)")
        return 1
    test_mpijob()
    test_trainjob()
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
