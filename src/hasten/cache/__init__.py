"""Tiered exact-match answer cache: keys, policy, entries, replay and stores."""

from __future__ import annotations

from hasten.cache.decision import (
    CacheDecision,
    CacheDirectives,
    decide,
    is_deterministic,
    parse_cache_control,
)
from hasten.cache.entry import AnswerKind, CachedAnswer
from hasten.cache.factory import BACKENDS, build_cache
from hasten.cache.memory import MemoryLRU
from hasten.cache.redis_store import RedisStore
from hasten.cache.replay import answer_body, answer_frames
from hasten.cache.request_key import cache_key, namespaced_key, request_key, with_headers
from hasten.cache.sqlite_store import SQLiteStore
from hasten.cache.tiered import L2Store, TieredCache
from hasten.config.cache_policy import ModelCachePolicy

__all__ = [
    "BACKENDS",
    "AnswerKind",
    "CacheDecision",
    "CacheDirectives",
    "CachedAnswer",
    "L2Store",
    "MemoryLRU",
    "ModelCachePolicy",
    "RedisStore",
    "SQLiteStore",
    "TieredCache",
    "answer_body",
    "answer_frames",
    "build_cache",
    "cache_key",
    "decide",
    "is_deterministic",
    "namespaced_key",
    "parse_cache_control",
    "request_key",
    "with_headers",
]
