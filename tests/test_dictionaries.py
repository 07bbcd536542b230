"""Every zstd dictionary a version of grebe wrote frames with still reads them: a new
dictionary ships beside the old ones (grebe.zdict), and store bodies and local-log values
written with any earlier one decompress with today's readers."""

from __future__ import annotations

import msgspec
import pytest
import zstandard

from grebe import constants as C
from grebe.brokers import local_sql
from grebe.stores import bodies
from grebe.zdict import DictCodec

BODY = msgspec.msgpack.encode({"labels": ["safe"], "reasons": {"hate": "head hate 0.04 < 0.72 "
                      "(validation threshold at FPR 0.01)"}, "policy_version": "2026.11.23-6"})


@pytest.mark.parametrize("dict_id", [1, 3, 4, 5, 6, C.BODY_DICT_ID])
def test_store_bodies_of_every_shipped_dictionary_read(dict_id: int) -> None:
    frame = DictCodec(C.BODY_DICT_PREFIX, dict_id, C.BODY_ZSTD_LEVEL).compress(BODY)
    assert zstandard.get_frame_parameters(frame).dict_id == dict_id
    assert bodies.decompress(frame) == BODY


@pytest.mark.parametrize("dict_id", [101, 102, 103, 104, 105, C.LOG_DICT_ID])
def test_log_values_of_every_shipped_dictionary_read(dict_id: int) -> None:
    frame = DictCodec(C.LOG_DICT_PREFIX, dict_id, C.LOG_ZSTD_LEVEL).compress(BODY)
    assert local_sql._values.decompress(frame) == BODY


def test_new_frames_use_the_newest_dictionaries() -> None:
    assert C.BODY_DICT_ID == 7 and C.LOG_DICT_ID == 106
    assert zstandard.get_frame_parameters(bodies.compress(BODY)).dict_id == 7
    assert zstandard.get_frame_parameters(local_sql._values.compress(BODY)).dict_id == 106
