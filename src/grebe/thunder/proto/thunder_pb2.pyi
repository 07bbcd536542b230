from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetInNetworkPostsRequest(_message.Message):
    __slots__ = ("user_id", "following_user_ids", "exclude_post_ids", "max_results", "is_video_request", "debug")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    FOLLOWING_USER_IDS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_POST_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    IS_VIDEO_REQUEST_FIELD_NUMBER: _ClassVar[int]
    DEBUG_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    following_user_ids: _containers.RepeatedScalarFieldContainer[str]
    exclude_post_ids: _containers.RepeatedScalarFieldContainer[str]
    max_results: int
    is_video_request: bool
    debug: bool
    def __init__(self, user_id: _Optional[str] = ..., following_user_ids: _Optional[_Iterable[str]] = ..., exclude_post_ids: _Optional[_Iterable[str]] = ..., max_results: _Optional[int] = ..., is_video_request: _Optional[bool] = ..., debug: _Optional[bool] = ...) -> None: ...

class LightPost(_message.Message):
    __slots__ = ("post_id", "author_id", "created_at", "is_reply", "is_retweet", "in_reply_to_post_id", "in_reply_to_author_id", "conversation_id", "source_post_id", "source_author_id", "quote_of_post_id", "has_video", "conversation_author_id", "video_eligible")
    POST_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    IS_REPLY_FIELD_NUMBER: _ClassVar[int]
    IS_RETWEET_FIELD_NUMBER: _ClassVar[int]
    IN_REPLY_TO_POST_ID_FIELD_NUMBER: _ClassVar[int]
    IN_REPLY_TO_AUTHOR_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POST_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_AUTHOR_ID_FIELD_NUMBER: _ClassVar[int]
    QUOTE_OF_POST_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_VIDEO_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_AUTHOR_ID_FIELD_NUMBER: _ClassVar[int]
    VIDEO_ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    post_id: str
    author_id: str
    created_at: float
    is_reply: bool
    is_retweet: bool
    in_reply_to_post_id: str
    in_reply_to_author_id: str
    conversation_id: str
    source_post_id: str
    source_author_id: str
    quote_of_post_id: str
    has_video: bool
    conversation_author_id: str
    video_eligible: bool
    def __init__(self, post_id: _Optional[str] = ..., author_id: _Optional[str] = ..., created_at: _Optional[float] = ..., is_reply: _Optional[bool] = ..., is_retweet: _Optional[bool] = ..., in_reply_to_post_id: _Optional[str] = ..., in_reply_to_author_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., source_post_id: _Optional[str] = ..., source_author_id: _Optional[str] = ..., quote_of_post_id: _Optional[str] = ..., has_video: _Optional[bool] = ..., conversation_author_id: _Optional[str] = ..., video_eligible: _Optional[bool] = ...) -> None: ...

class DebugInfo(_message.Message):
    __slots__ = ("authors_scanned", "candidates", "elapsed_ms", "store_posts", "freshness_s")
    AUTHORS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_POSTS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_S_FIELD_NUMBER: _ClassVar[int]
    authors_scanned: int
    candidates: int
    elapsed_ms: float
    store_posts: int
    freshness_s: float
    def __init__(self, authors_scanned: _Optional[int] = ..., candidates: _Optional[int] = ..., elapsed_ms: _Optional[float] = ..., store_posts: _Optional[int] = ..., freshness_s: _Optional[float] = ...) -> None: ...

class GetInNetworkPostsResponse(_message.Message):
    __slots__ = ("posts", "partial", "debug")
    POSTS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    DEBUG_FIELD_NUMBER: _ClassVar[int]
    posts: _containers.RepeatedCompositeFieldContainer[LightPost]
    partial: bool
    debug: DebugInfo
    def __init__(self, posts: _Optional[_Iterable[_Union[LightPost, _Mapping]]] = ..., partial: _Optional[bool] = ..., debug: _Optional[_Union[DebugInfo, _Mapping]] = ...) -> None: ...
