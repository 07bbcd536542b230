"""Outside `grebe/brokers/` nothing imports a broker's own modules (its source, producer,
log): everything goes through the backend (factory, registry, backend and dead-letter
types), so a new broker is one module and no caller has to learn its name. Read from
the syntax trees of src/, lazy imports inside functions included."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "grebe"
#: What grebe outside brokers/ may import from the package: the broker-neutral parts.
NEUTRAL = {"grebe.brokers", "grebe.brokers.factory", "grebe.brokers.registry",
           "grebe.brokers.backend", "grebe.brokers.dead_letters"}
#: config.py assembles the built-in brokers' top-level settings sections from them.
SETTINGS = {"grebe.brokers.local_backend", "grebe.brokers.kafka_backend",
            "grebe.brokers.rabbitmq_backend"}


def _broker_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in names if n.startswith("grebe.brokers")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("grebe.brokers")}
    return found


def test_only_the_backend_seam_is_imported_from_outside_brokers() -> None:
    offenders = {}
    for path in SRC.rglob("*.py"):
        if SRC / "brokers" in path.parents:
            continue
        allowed = NEUTRAL | (SETTINGS if path == SRC / "config.py" else set())
        bad = {name for name in _broker_imports(path)
               if name not in allowed and name.rsplit(".", 1)[0] not in allowed}
        if bad:
            offenders[str(path.relative_to(SRC))] = sorted(bad)
    assert offenders == {}
