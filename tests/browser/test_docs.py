"""The docs page in a real browser: Swagger UI renders the API description and calls the
gateway under the page's strict CSP, with not one violation."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

# Recorded from the first script on: every CSP violation of the page, as the browser saw it.
WATCH_CSP = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""


def test_the_docs_page_renders_and_tries_a_route_with_no_csp_violation(
    page: Page, gateway: str
) -> None:
    page.add_init_script(WATCH_CSP)
    answer = page.goto(f"{gateway}/docs")
    assert answer is not None
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("a2a-continue")
    health = page.locator(".opblock-summary-path[data-path='/healthz']")
    expect(health).to_be_visible()
    health.click()
    page.locator(".try-out__btn").first.click()
    page.locator(".execute").first.click()
    answered = page.locator(".live-responses-table tr.response")
    expect(answered.locator(".response-col_status")).to_have_text("200")
    expect(answered.locator(".response-col_description")).to_contain_text('"status": "ok"')
    assert page.evaluate("window.__violations") == []
