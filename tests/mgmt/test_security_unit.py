"""The session cookie's CSRF token and who a request is from, without a broker process."""

from __future__ import annotations

import pytest

from broker.security.principal import Principal
from mgmt.security import Authenticated, CsrfRefused, Sessions, check_csrf

pytestmark = pytest.mark.timeout(30)

GUEST = Principal("guest", "passwordFile")


@pytest.fixture
def sessions() -> Sessions:
    return Sessions()


def test_each_session_has_its_own_token(sessions: Sessions) -> None:
    first, second = sessions.open(GUEST), sessions.open(GUEST)
    one, two = sessions.session(first), sessions.session(second)
    assert one is not None and two is not None
    assert len(one.csrf_token) >= 32 and one.csrf_token != two.csrf_token
    assert one.csrf_token not in (first, second)          # not derived from the cookie
    sessions.close(first)
    assert sessions.session(first) is None and sessions.principal(second) == GUEST


def test_expired_sessions_are_forgotten() -> None:
    now = [0.0]
    sessions = Sessions(idle_timeout=10, clock=lambda: now[0])
    token = sessions.open(GUEST)
    now[0] = 11.0
    assert sessions.session(token) is None


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH", "post"])
def test_a_cookie_request_that_changes_something_needs_the_token(sessions: Sessions,
                                                                 method: str) -> None:
    session = sessions.session(sessions.open(GUEST))
    assert session is not None
    by_cookie = Authenticated(GUEST, session)
    with pytest.raises(CsrfRefused, match="must carry the session's CSRF token in header"
                                          " X-DeltaMQ-CSRF"):
        check_csrf(method, by_cookie, None)
    with pytest.raises(CsrfRefused, match="does not hold this session's CSRF token"):
        check_csrf(method, by_cookie, "forged")
    check_csrf(method, by_cookie, session.csrf_token)


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_reading_needs_no_token(sessions: Sessions, method: str) -> None:
    session = sessions.session(sessions.open(GUEST))
    check_csrf(method, Authenticated(GUEST, session), None, "cross-site")


def test_basic_and_anonymous_requests_need_no_token() -> None:
    check_csrf("DELETE", Authenticated(GUEST), None)
    check_csrf("POST", Authenticated(Principal("anonymous", "anon", anonymous=True)), None,
               "same-origin")


@pytest.mark.parametrize("site", ["cross-site", "same-site", "CROSS-SITE"])
def test_a_browser_request_from_another_site_is_refused_whatever_its_credentials(
        site: str) -> None:
    with pytest.raises(CsrfRefused, match="another site"):
        check_csrf("POST", Authenticated(GUEST), None, site)
