"""The console in a real browser: Debian's chromium, headless, against a gateway process and
the sample agent (SPEC §13)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ADMIN, ALICE, JSON, Hooks, Rest
from tests.support.ports import free_port
from tests.support.processes import gateway_env, run_cli, start_serve, wait_ready

pytestmark = pytest.mark.browser

PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def sign_in(page: Page, gateway: str, bearer: str = ALICE) -> None:
    page.goto(f"{gateway}/console")
    page.fill("#token", bearer)
    page.click("#sign-in-form button")
    expect(page.locator("#nav")).to_be_visible()


def open_task(page: Page, gateway: str, agent: JSON, task: JSON) -> None:
    page.goto(f"{gateway}/console?view=task&agentId={agent['id']}&taskId={task['id']}")
    expect(page.locator("#t-id")).to_have_text(task["id"])
    expect(page.locator("#timeline li[data-seq='1']")).to_be_visible()


def test_signing_in_with_a_pasted_token_shows_the_callers_name(page: Page, gateway: str) -> None:
    sign_in(page, gateway)
    expect(page.locator("#who")).to_have_text("alice@example.com")
    expect(page.locator("#tasks-view")).to_be_visible()


def test_a_refused_token_is_shown_as_the_problems_title_and_detail(
    page: Page, gateway: str
) -> None:
    page.goto(f"{gateway}/console")
    page.fill("#token", "not-a-token")
    page.click("#sign-in-form button")
    expect(page.locator("#error-title")).to_have_text("Unauthorized")
    expect(page.locator("#error-detail")).not_to_be_empty()
    expect(page.locator("#sign-in-view")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0


def test_the_console_command_prints_a_link_that_signs_in_once(
    page: Page, gateway: str, gateway_env_of: dict[str, str]
) -> None:
    done = run_cli("console", env=gateway_env_of)
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert link.startswith(f"{gateway}/console#code=")
    page.goto(link)
    expect(page.locator("#who")).to_have_text("admin@localhost (admin)")
    assert "code" not in page.url  # the fragment is dropped at once
    fresh = page.context.new_page()
    fresh.goto(link)
    expect(fresh.locator("#error-detail")).to_contain_text("already used")
    expect(fresh.locator("#sign-in-view")).to_be_visible()
    fresh.close()


def test_the_task_list_shows_tasks_of_two_agents(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    first, second = (rest.start(agent) for agent in agents)
    sign_in(page, gateway)
    for agent, task in zip(agents, (first, second), strict=True):
        row = page.locator(f"#tasks li[data-task-id='{task['id']}']")
        expect(row.locator(".agent")).to_have_text(agent["name"])
        expect(row.locator(".state")).to_have_text("input-required")


def test_the_agents_view_shows_each_agent_and_its_task_counts(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    rest.start(agents[1])
    sign_in(page, gateway)
    page.click("#nav a[data-view='agents']")
    row = page.locator(f"#agents li[data-agent-id='{agents[1]['id']}']")
    expect(row).to_contain_text("Weather 0.3")
    expect(row).to_contain_text("A2A 0.3")
    expect(row.locator(".counts")).to_contain_text("input-required")
    streaming = page.locator(f"#agents li[data-agent-id='{agents[0]['id']}']")
    expect(streaming).to_contain_text("streams")


def test_registering_a_card_the_gateway_cannot_fetch_shows_the_problem(
    page: Page, gateway: str
) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway}/console?view=agents")
    page.click("#register summary")
    page.fill("#card-url", "http://127.0.0.1:9/")
    page.click("#register-form button")
    expect(page.locator("#error-title")).not_to_be_empty()
    expect(page.locator("#error-detail")).to_contain_text("card")


def test_the_timeline_updates_live_when_a_follow_up_is_sent_from_outside(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    agent = agents[1]
    task = rest.start(agent)
    sign_in(page, gateway)
    open_task(page, gateway, agent, task)
    expect(page.locator("#live")).to_have_text("(live)")
    expect(page.locator("#reply-form")).to_be_visible()
    rest.reply(agent, task, "Paris")  # not through the page
    expect(page.locator("#timeline li[data-type='task_continued']")).to_contain_text(
        "input-required → completed"
    )
    expect(page.locator("#t-state")).to_have_text("completed")
    expect(page.locator("#t-artifacts")).to_contain_text("Sunny in Paris")
    expect(page.locator("#reply-form")).to_be_hidden()
    expect(page.locator("#live")).to_have_text("(finished)")


def test_the_task_view_shows_push_deliveries_and_redelivers_one_under_its_id(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON], receiver: Hooks
) -> None:
    agent = agents[1]
    task = rest.start(agent)
    path = f"/v1/a2a/{agent['id']}/tasks/{task['id']}/push-configs"
    made = rest.call("POST", path, {"url": receiver.url, "token": "receiver-secret"})
    assert made.status_code == 201, made.text
    config = made.json()
    rest.reply(agent, task, "Paris")  # the change the config pushes
    first = receiver.wait_for(bool, "a first delivery")[0]
    sign_in(page, gateway)
    open_task(page, gateway, agent, task)
    shown = page.locator(f"#push .push-config[data-config-id='{config['id']}']")
    expect(shown.locator(".title")).to_have_text(receiver.url)
    expect(shown).to_contain_text("A2A 1.0")
    row = shown.locator(f"tr[data-delivery-id='{first}']")
    expect(row.locator("[data-column='state']")).to_have_text("delivered")
    sent_at = row.locator("[data-column='deliveredAt'] time")
    before = sent_at.get_attribute("datetime")
    assert before
    row.locator("button.redeliver").click()
    ids = receiver.wait_for(lambda ids: ids.count(first) == 2, "the redelivery")
    assert ids.count(first) == 2  # the same A2A-Delivery-Id, twice
    expect(sent_at).not_to_have_attribute("datetime", before)
    expect(row.locator("[data-column='state']")).to_have_text("delivered")
    listed = rest.call("GET", f"{path}/{config['id']}/deliveries").json()["deliveries"]
    again = next(d for d in listed if d["id"] == first)
    assert again["state"] == "delivered"
    expect(sent_at).to_have_attribute("datetime", again["deliveredAt"])
    expect(page.locator("#push .push-error")).to_have_count(0)
    shot = os.environ.get("A2AC_CONSOLE_SCREENSHOT")
    if shot:
        page.set_viewport_size({"width": 1000, "height": 1000})
        page.screenshot(path=shot, full_page=True)


@pytest.mark.parametrize("streamed", [True, False], ids=["streaming-agent", "blocking-agent"])
def test_answering_an_input_required_task_from_the_page_completes_it(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON], streamed: bool
) -> None:
    agent = agents[0] if streamed else agents[1]
    task = rest.start(agent)
    sign_in(page, gateway)
    open_task(page, gateway, agent, task)
    page.fill("#reply", "Lyon")
    page.click("#reply-form button")
    expect(page.locator("#t-state")).to_have_text("completed")
    expect(page.locator("#t-artifacts")).to_contain_text("Sunny in Lyon")
    expect(page.locator("#timeline li[data-type='task_continued']")).to_be_visible()
    assert rest.task(agent, task["id"])["state"] == "completed"


def test_cancel_from_the_page_cancels_the_task(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    agent = agents[0]
    task = rest.start(agent)
    sign_in(page, gateway)
    open_task(page, gateway, agent, task)
    page.click("#cancel")
    expect(page.locator("#cancel")).to_have_text("Cancel it: click again")
    assert rest.task(agent, task["id"])["state"] == "input-required"  # one click asks only
    page.click("#cancel")
    expect(page.locator("#t-state")).to_have_text("canceled")
    expect(page.locator("#timeline li[data-type='task_canceled']")).to_be_visible()
    expect(page.locator("#cancel")).to_be_hidden()
    assert rest.task(agent, task["id"])["state"] == "canceled"


def test_markup_in_an_agents_answer_is_shown_as_text_and_never_runs(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    agent = agents[1]
    task = rest.start(agent)
    rest.reply(agent, task, PAYLOAD)  # the agent answers "Sunny in <img …><script>…"
    sign_in(page, gateway)
    open_task(page, gateway, agent, task)
    expect(page.locator("#t-artifacts")).to_contain_text(f"Sunny in {PAYLOAD}")
    expect(page.locator("#timeline li[data-type='task_continued']")).to_be_visible()
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.__pwned") is None
    page.goto(f"{gateway}/console?view=tasks")
    expect(page.locator(f"#tasks li[data-task-id='{task['id']}']")).to_be_visible()
    assert page.evaluate("window.__pwned") is None


def test_filters_survive_a_reload_from_the_url(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    agent = agents[1]
    waiting = rest.start(agent)
    done = rest.start(agent)
    rest.reply(agent, done, "Oslo")
    other = rest.start(agents[0])
    sign_in(page, gateway)
    page.select_option("#f-state", "input-required")
    page.select_option("#f-agent", agent["id"])
    page.click("#filters button[type='submit']")
    expect(page).to_have_url(re.compile(r"state=input-required"))
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"view": ["tasks"], "state": ["input-required"], "agentId": [agent["id"]]}
    page.reload()
    expect(page.locator("#f-state")).to_have_value("input-required")
    expect(page.locator("#f-agent")).to_have_value(agent["id"])
    expect(page.locator(f"#tasks li[data-task-id='{waiting['id']}']")).to_be_visible()
    assert page.locator(f"#tasks li[data-task-id='{done['id']}']").count() == 0
    assert page.locator(f"#tasks li[data-task-id='{other['id']}']").count() == 0
    assert set(page.locator("#tasks .state").all_inner_texts()) == {"input-required"}


def test_no_view_scrolls_sideways_at_375_px(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    agent = agents[1]
    task = rest.start(agent)
    rest.reply(agent, task, "Llanfairpwllgwyngyll" * 6 + " " + "x" * 300)  # a long word
    page.set_viewport_size({"width": 375, "height": 800})
    sign_in(page, gateway)
    views = {
        "tasks": "#tasks li",
        "agents": "#agents li .counts span",
        f"task&agentId={agent['id']}&taskId={task['id']}": "#timeline li",
    }
    for view, shown in views.items():
        page.goto(f"{gateway}/console?view={view}")
        expect(page.locator(shown).first).to_be_visible()
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], (view, width)


def test_the_token_is_never_in_a_url_a_cookie_or_local_storage(
    page: Page, gateway: str, rest: Rest, agents: tuple[JSON, JSON]
) -> None:
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    agent = agents[0]
    task = rest.start(agent)
    sign_in(page, gateway, ADMIN)
    page.goto(f"{gateway}/console?view=agents")
    expect(page.locator("#agents li").first).to_be_visible()
    open_task(page, gateway, agent, task)
    page.fill("#reply", "Rome")
    page.click("#reply-form button")
    expect(page.locator("#t-state")).to_have_text("completed")
    assert urls
    assert [url for url in urls if ADMIN in url or "token" in url.lower()] == []
    assert page.context.cookies() == []
    assert page.evaluate("document.cookie") == ""
    assert page.evaluate("localStorage.length") == 0
    assert page.evaluate("Object.values(sessionStorage)") == [ADMIN]


def test_the_timeline_resumes_after_the_stream_drops_with_no_gap_or_repeat(
    page: Page, database_url: str, rest: Rest, agents: tuple[JSON, JSON], tmp_path: Path
) -> None:
    port = free_port()
    env = gateway_env(database_url, A2AC_PORT=str(port))
    own = f"http://127.0.0.1:{port}"
    agent = agents[1]
    task = rest.start(agent)
    with (tmp_path / "first.log").open("wb") as out:
        first = start_serve(env, port, stdout=out, stderr=subprocess.STDOUT)
    second = None
    try:
        wait_ready(port, first)
        sign_in(page, own)
        open_task(page, own, agent, task)
        expect(page.locator("#live")).to_have_text("(live)")
        first.kill()  # the stream drops mid-task
        first.wait(timeout=60)
        expect(page.locator("#live")).to_have_text("(reconnecting…)")
        rest.reply(agent, task, "Paris")  # while the page is cut off
        with (tmp_path / "second.log").open("wb") as out:
            second = start_serve(env, port, stdout=out, stderr=subprocess.STDOUT)
        wait_ready(port, second)
        expect(page.locator("#live")).to_have_text("(finished)")
        seqs = page.locator("#timeline li").evaluate_all("items => items.map(i => i.dataset.seq)")
        assert seqs == ["1", "2"]
        expect(page.locator("#t-state")).to_have_text("completed")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
