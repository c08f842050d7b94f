"""deploy/kubernetes/gateway.yaml holds together: the files its gateway config names are where the Deployment
mounts them, its Redis URL names the Redis Service, and the embedded gateway.yaml is a valid gateway config."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from semsched.core.tiers import DEFAULT_TIERS
from semsched.gateway.config import parse_config

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "gateway.yaml"


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """The manifest's objects by (kind, name)."""
    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d is not None]
    found = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    assert len(found) == len(documents), "two objects of one kind share a name"
    return found


def _gateway_config(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    config = yaml.safe_load(objects[("ConfigMap", "semsched-gateway")]["data"]["gateway.yaml"])
    assert isinstance(config, dict)
    return config


def _keys(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    keys = yaml.safe_load(objects[("Secret", "semsched-gateway-keys")]["stringData"]["keys.yaml"])
    assert isinstance(keys, dict)
    return keys


def _mounted_files(deployment: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Each file the gateway container sees -> (ConfigMap or Secret, its name, its key)."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    files = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        sources = volume["projected"]["sources"] if "projected" in volume else [volume]
        for source in sources:
            for kind, field in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if field in source:
                    name = source[field].get("name") or source[field]["secretName"]
                    for item in source[field]["items"]:
                        path = str(PurePosixPath(mount["mountPath"]) / item["path"])
                        files[path] = (kind, name, item["key"])
    return files


def test_the_gateway_reads_its_config_and_keys_where_they_are_mounted(
        objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = objects[("Deployment", "semsched-gateway")]
    assert deployment["spec"]["replicas"] == 2
    files = _mounted_files(deployment)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert files[command[command.index("--config") + 1]] == ("ConfigMap", "semsched-gateway", "gateway.yaml")
    config = _gateway_config(objects)
    assert "api_keys" not in config, "the keys belong in the Secret"
    assert files[config["keys_file"]] == ("Secret", "semsched-gateway-keys", "keys.yaml")
    tiers = {tier.name for tier in DEFAULT_TIERS}
    keys = _keys(objects)
    assert keys and all(set(entry) == {"tier", "tenant"} and entry["tier"] in tiers for entry in keys.values())


def test_the_shared_state_url_names_the_redis_service(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    url = urlsplit(_gateway_config(objects)["shared_state"]["redis_url"])
    service = objects[("Service", "semsched-redis")]
    namespace = service["metadata"]["namespace"]
    assert url.scheme == "redis"
    assert url.hostname == f"{service['metadata']['name']}.{namespace}.svc.cluster.local"
    assert url.port == service["spec"]["ports"][0]["port"]
    redis = objects[("Deployment", "semsched-redis")]
    assert redis["metadata"]["namespace"] == namespace
    assert service["spec"]["selector"] == redis["spec"]["template"]["metadata"]["labels"]
    container = redis["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("redis:7")
    args = container["args"]
    assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no"


def test_the_embedded_config_is_a_valid_gateway_config(
        objects: dict[tuple[str, str], dict[str, Any]], tmp_path: Path) -> None:
    """The ConfigMap's gateway.yaml as the gateway parses it, with keys_file at a copy of the Secret's keys.yaml
    (its path in the pod is checked above)."""
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(objects[("Secret", "semsched-gateway-keys")]["stringData"]["keys.yaml"])
    embedded = _gateway_config(objects)
    config = parse_config({**embedded, "keys_file": str(keys_file)}, source="gateway.yaml")
    assert config.model_dump()["shared_state"]["redis_url"] == embedded["shared_state"]["redis_url"]
    assert set(config.client_keys()) == set(_keys(objects))  # api_keys and keys_file merged
