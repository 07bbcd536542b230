"""The app layer hands engine processes a recipe they can receive: strings only, so it
pickles and travels in a frame, and its builder rebuilds the configured bundle from it."""

import pickle

from grebe.app.engines import ENGINE_BUNDLE_BUILDER, bundle_recipe, engine_bundle
from grebe.app.settings import dispatcher_settings, engine_settings, stream_settings
from grebe.config import load_config
from grebe.core.bundle import PlanBundle, import_callable
from grebe.core.settings import DispatcherSettings, EngineSettings, StreamSettings


def _config(tmp_path):
    return load_config(
        data_dir=tmp_path, engine={"processes": 3, "concurrency": 7, "task_timeout_s": 4.5},
        dispatcher={"max_attempts": 5, "poll_batch": 9},
        streams=[{"name": "posts", "eligibilities": ["noop"], "max_qps": 2.5}],
        output={"broker": "none"}, store={"backend": "memory"},
    )


def test_the_recipe_pickles_and_rebuilds_the_configured_bundle(tmp_path):
    recipe = bundle_recipe(_config(tmp_path))
    assert pickle.loads(pickle.dumps(recipe)) == recipe
    assert recipe.builder == ENGINE_BUNDLE_BUILDER
    builder = import_callable(recipe.builder, "engine bundle builder")
    assert builder is engine_bundle
    bundle = builder(recipe.argument)
    assert isinstance(bundle, PlanBundle)
    assert {p.name for p in bundle.plans} >= {"noop"}
    assert all(p.task_timeout_s == 4.5 for p in bundle.plans)  # engine.task_timeout_s


def test_core_settings_carry_the_configured_values(tmp_path):
    config = _config(tmp_path)
    assert engine_settings(config.engine) == EngineSettings(processes=3, concurrency=7)
    dispatcher = dispatcher_settings(config.dispatcher)
    assert isinstance(dispatcher, DispatcherSettings)
    assert (dispatcher.max_attempts, dispatcher.poll_batch) == (5, 9)
    assert stream_settings(config.streams[0]) == StreamSettings(
        name="posts", eligibilities=("noop",), max_qps=2.5
    )


def test_secrets_reach_the_engines_unmasked(tmp_path):
    # model_dump_json masks SecretStr as "**********": engines would log in to Kafka
    # with the mask. The recipe carries the real values; the parsed config equals ours.
    from grebe.config import GrebeConfig

    config = load_config(
        data_dir=tmp_path, output={"broker": "none"}, store={"backend": "memory"},
        kafka={"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
               "sasl_username": "grebe", "sasl_password": "s3cret-pass",
               "ssl_key_password": "key-pass"})
    received = GrebeConfig.model_validate_json(bundle_recipe(config).argument)
    assert received.kafka.sasl_password is not None
    assert received.kafka.sasl_password.get_secret_value() == "s3cret-pass"
    assert received.kafka.ssl_key_password.get_secret_value() == "key-pass"
    assert received == config
