"""Which pod and container `logs` and `exec` mean, from the pods the daemon lists: pure
functions, kubectl's rules and messages, plus the static pod's name without its node."""

from __future__ import annotations

from pykubelet.messages.pod import Pod, PodList

from ._client import InspectError


def find_pod(pods: PodList, name: str, namespace: str) -> Pod:
    """The pod called `name` in `namespace`; failing that, the one pod there whose name
    starts with "<name>-" (a static pod's manifest name, before the node name appended)."""
    here = [pod for pod in pods.items if pod.metadata.namespace == namespace]
    exact = [pod for pod in here if pod.metadata.name == name]
    if exact:
        return exact[0]
    prefixed = [pod for pod in here if pod.metadata.name.startswith(name + "-")]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        names = ", ".join(sorted(pod.metadata.name for pod in prefixed))
        raise InspectError(f'pod "{name}" not found in namespace "{namespace}", and several start with "{name}-": '
                           f"{names}; give the full name")
    elsewhere = sorted({pod.metadata.namespace for pod in pods.items if pod.metadata.namespace != namespace
                        and (pod.metadata.name == name or pod.metadata.name.startswith(name + "-"))})
    if len(elsewhere) == 1:
        hint = f"it is in namespace {elsewhere[0]}: pass -n {elsewhere[0]}"
    elif elsewhere:
        hint = f"pods by that name are in namespaces {', '.join(elsewhere)}: pass -n with one of them"
    else:
        hint = "`pykubelet-inspect pods` lists the pods"
    raise InspectError(f'pod "{name}" not found in namespace "{namespace}"; {hint}')


def choose_container(pod: Pod, container: str | None) -> str:
    """`container` if the pod has it; without one, the pod's only container (kubectl logs:
    a pod with several needs -c, and the error lists them)."""
    names = [c.name for c in pod.spec.containers]
    inits = [c.name for c in pod.spec.init_containers]
    if container is not None:
        if container in names or container in inits:
            return container
        raise InspectError(f"container {container} is not valid for pod {pod.metadata.name}: {_choices(names, inits)}")
    if len(names) == 1:
        return names[0]
    raise InspectError(f"a container name must be specified for pod {pod.metadata.name}, {_choices(names, inits)}")


def _choices(names: list[str], inits: list[str]) -> str:
    text = f"choose one of: [{' '.join(names)}]"
    if inits:
        text += f" or one of the init containers: [{' '.join(inits)}]"
    return text
