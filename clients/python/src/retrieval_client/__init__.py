"""Client for the retrieval service: ``RetrievalClient`` / ``AsyncRetrievalClient``, typed results and errors.
The LangChain retriever and tool are in ``retrieval_client.langchain`` (extra ``langchain``)."""

from retrieval_client.client import AsyncRetrievalClient, RetrievalClient, __version__
from retrieval_client.errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    RetrievalError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
)
from retrieval_client.models import Contribution, Degradation, Notice, QueryVariant, SearchHit, SearchResult

__all__ = [
    "AsyncRetrievalClient", "AuthenticationError", "Contribution", "Degradation", "InvalidRequestError",
    "NotFoundError", "Notice", "QueryVariant", "RateLimitedError", "RetrievalClient", "RetrievalError", "SearchHit",
    "SearchResult", "ServerError", "ServiceUnavailableError", "TransportError", "__version__",
]  # fmt: skip
