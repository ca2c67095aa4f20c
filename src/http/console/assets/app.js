// The leasehold console. Talks only to this service, by relative URLs
// (the page is /console, so "purposes" is /purposes). No inline code: the
// page's Content-Security-Policy allows only 'self'. Everything shown is
// written with textContent, never as HTML.
'use strict';

(() => {
  const KEY = 'leasehold.apiKey';
  const POLL_MS = 500; // list polling, when the purpose stream is not there
  const $ = (id) => document.getElementById(id);

  const state = {
    purposes: [], // [{purpose, scopes}]
    any: null, // scopes on every other purpose, or null
    purpose: null,
    scopes: [],
    leases: new Map(), // digest -> {lease, at}
    selected: null, // digest
    feed: null, // AbortController of the stream or poll loop
    feedKind: '',
    historyAvailable: true,
    breakTarget: null, // {digest, fencingToken?}
    version: null, // of the selected lease, when its history was read
    permitsShown: '', // what the permits table shows
  };

  // ------------------------------------------------------------ requests --
  function headers(extra) {
    const h = Object.assign({ accept: 'application/json' }, extra || {});
    const key = sessionStorage.getItem(KEY);
    if (key) h.authorization = 'Bearer ' + key;
    return h;
  }

  async function api(path, options) {
    const opts = Object.assign({ cache: 'no-store', credentials: 'same-origin' }, options || {});
    opts.headers = headers(opts.headers);
    const response = await fetch(path, opts);
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    return { status: response.status, body };
  }

  function problemText(reply) {
    const b = reply.body || {};
    return b.detail || b.title || 'HTTP ' + reply.status;
  }

  function say(text) {
    $('message').textContent = text || '';
  }

  function leasePath(purpose, digest) {
    return 'leases/' + encodeURIComponent(purpose) + (digest ? '/' + encodeURIComponent(digest) : '');
  }

  // --------------------------------------------------------- formatting --
  function ms(value) {
    if (value === undefined || value === null) return '—';
    if (value < 0) value = 0;
    if (value < 10000) return (value / 1000).toFixed(1) + ' s';
    if (value < 3600000) return Math.round(value / 1000) + ' s';
    return (value / 3600000).toFixed(1) + ' h';
  }

  function shortDigest(d) {
    return d.length > 16 ? d.slice(0, 14) + '…' : d;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function row(cells) {
    const tr = document.createElement('tr');
    for (const c of cells) tr.appendChild(c instanceof Node ? wrapCell(c) : el('td', c));
    return tr;
  }

  function wrapCell(node) {
    if (node.tagName === 'TD') return node;
    const td = document.createElement('td');
    td.appendChild(node);
    return td;
  }

  // Remaining time counts down from when the figure arrived.
  function left(entry, field) {
    const v = entry.lease[field];
    if (v === undefined || v === null) return undefined;
    return v - (performance.now() - entry.at);
  }

  // ----------------------------------------------------------- the key --
  function showKeyForm(error) {
    $('main').hidden = true;
    $('forget').hidden = true;
    $('key-panel').hidden = false;
    $('key-error').textContent = error || '';
    $('who').textContent = '';
    $('key-input').focus();
  }

  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = $('key-input');
    const key = input.value.trim();
    input.value = ''; // the key lives in sessionStorage only, never in the page
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    start();
  });

  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    stopFeed();
    state.purpose = null;
    showKeyForm('');
  });

  // ---------------------------------------------------------- purposes --
  async function start() {
    say('');
    let reply;
    try {
      reply = await api('purposes');
    } catch (e) {
      say('The service did not answer: ' + e.message);
      return;
    }
    if (reply.status === 401) {
      const had = sessionStorage.getItem(KEY);
      sessionStorage.removeItem(KEY);
      showKeyForm(had ? 'That key was refused.' : '');
      return;
    }
    if (reply.status !== 200 || !reply.body) {
      say('Could not list purposes: ' + problemText(reply));
      return;
    }
    const b = reply.body;
    state.purposes = b.purposes || [];
    state.any = b.anyPurpose ? b.anyPurpose.scopes : null;
    $('key-panel').hidden = true;
    $('main').hidden = false;
    const keyed = b.access === 'keys';
    $('forget').hidden = !keyed;
    $('who').textContent = keyed ? 'API key in use (kept in this tab)' : 'open API (no keys configured)';
    renderPurposes();
    if (state.purpose) selectPurpose(state.purpose);
    else if (state.purposes.length === 1) selectPurpose(state.purposes[0].purpose);
  }

  function scopesOf(purpose) {
    const named = state.purposes.find((p) => p.purpose === purpose);
    if (named) return named.scopes;
    return state.any || [];
  }

  function renderPurposes() {
    const ul = $('purposes');
    ul.replaceChildren();
    for (const p of state.purposes) {
      const b = el('button');
      b.type = 'button';
      b.dataset.purpose = p.purpose;
      b.appendChild(el('span', p.purpose));
      b.appendChild(el('span', p.scopes.join(' '), 'scopes'));
      if (p.purpose === state.purpose) b.classList.add('current');
      b.addEventListener('click', () => selectPurpose(p.purpose));
      const li = el('li');
      li.appendChild(b);
      ul.appendChild(li);
    }
    if (!state.purposes.length && !state.any) ul.appendChild(el('li', 'This key may read no purpose.', 'muted'));
    $('other-purpose').hidden = !state.any;
  }

  $('other-purpose').addEventListener('submit', (event) => {
    event.preventDefault();
    const p = $('other-input').value.trim();
    if (/^[a-z][a-z0-9-]{0,62}$/.test(p)) selectPurpose(p);
    else say('A purpose is a lowercase letter, then up to 62 of a-z, 0-9 and -.');
  });

  function selectPurpose(purpose) {
    stopFeed();
    state.purpose = purpose;
    state.scopes = scopesOf(purpose);
    state.leases.clear();
    state.selected = null;
    state.version = null;
    $('detail-panel').hidden = true;
    $('leases-title').textContent = 'Leases of ' + purpose;
    renderPurposes();
    renderLeases();
    startFeed(purpose);
  }

  // -------------------------------------------------------------- feeds --
  function stopFeed() {
    if (state.feed) state.feed.abort();
    state.feed = null;
  }

  function feedStatus(text) {
    $('feed-status').textContent = text;
  }

  // The purpose-wide stream when the service has it; otherwise the list,
  // polled.
  async function startFeed(purpose) {
    const ctl = new AbortController();
    state.feed = ctl;
    let response = null;
    try {
      response = await fetch(leasePath(purpose) + '/events', {
        headers: headers({ accept: 'text/event-stream' }),
        cache: 'no-store',
        signal: ctl.signal,
      });
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    const type = response ? response.headers.get('content-type') || '' : '';
    if (response && response.ok && type.startsWith('text/event-stream')) {
      state.feedKind = 'stream';
      feedStatus('Live: following the purpose stream.');
      readStream(purpose, response, ctl);
      return;
    }
    if (response && response.body) response.body.cancel().catch(() => {});
    if (response && (response.status === 401 || response.status === 403)) {
      feedStatus('Not allowed: ' + (await response.json().catch(() => ({}))).detail);
      return;
    }
    state.feedKind = 'poll';
    feedStatus('Purpose stream not available here: polling the list every ' + POLL_MS / 1000 + ' s.');
    poll(purpose, ctl);
  }

  async function readStream(purpose, response, ctl) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let fresh = true;
    let event = { name: 'message', data: [] };
    let cut = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl).replace(/\r$/, '');
          buffer = buffer.slice(nl + 1);
          if (line === '') {
            if (event.data.length) fresh = onEvent(event.name, event.data.join('\n'), fresh);
            event = { name: 'message', data: [] };
          } else if (line.startsWith('event:')) {
            event.name = line.slice(6).trim();
          } else if (line.startsWith('data:')) {
            event.data.push(line.slice(5).replace(/^ /, ''));
          }
        }
      }
    } catch (_) {
      cut = true; // aborted, or the connection broke
    }
    if (!ctl.signal.aborted && state.purpose === purpose) {
      // A stream the service ended (its time bound) is resumed at once, a
      // broken one after a second; either starts with a fresh snapshot.
      feedStatus('Stream ended; reconnecting…');
      setTimeout(
        () => {
          if (!ctl.signal.aborted && state.purpose === purpose) startFeed(purpose);
        },
        cut ? 1000 : 0,
      );
    }
  }

  function onEvent(name, data, fresh) {
    let body;
    try {
      body = JSON.parse(data);
    } catch (_) {
      return fresh;
    }
    const now = performance.now();
    // The purpose stream starts over (`reset`): the snapshot that follows
    // replaces what is shown.
    if (name === 'reset') return true;
    if (name === 'snapshot') {
      if (fresh) state.leases.clear();
      for (const lease of body.leases || []) state.leases.set(lease.digest, { lease, at: now });
      renderLeases();
      return false;
    }
    if (body.digest) {
      if (body.held || body.lockDelayRemainingMs) state.leases.set(body.digest, { lease: body, at: now });
      else state.leases.delete(body.digest);
      renderLeases();
      if (body.digest === state.selected) refreshDetail();
    }
    return false;
  }

  async function poll(purpose, ctl) {
    while (!ctl.signal.aborted) {
      const started = performance.now();
      try {
        const seen = new Map();
        let cursor = null;
        let pages = 0;
        let ok = true;
        do {
          const q = '?limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : '');
          const reply = await api(leasePath(purpose) + q, { signal: ctl.signal });
          if (reply.status !== 200) {
            feedStatus('Could not list: ' + problemText(reply));
            ok = false;
            break;
          }
          const now = performance.now();
          for (const lease of reply.body.leases || []) seen.set(lease.digest, { lease, at: now });
          cursor = reply.body.nextCursor;
          pages += 1;
        } while (cursor && pages < 10 && !ctl.signal.aborted);
        if (ctl.signal.aborted) return;
        if (ok) {
          // On a failed page, what was shown stays until the next round.
          state.leases = seen;
          renderLeases();
          if (state.selected) refreshDetail();
        }
      } catch (_) {
        if (ctl.signal.aborted) return;
      }
      const wait = Math.max(0, POLL_MS - (performance.now() - started));
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  // ------------------------------------------------------------- leases --
  // Rows are kept per digest and updated in place (a row rebuilt under the
  // pointer would swallow the click); one listener serves them all.
  const rows = new Map(); // digest -> tr
  let emptyRow = null;

  function leaseCells(entry) {
    const l = entry.lease;
    return [
      shortDigest(l.digest),
      l.holder || '—',
      (l.holders ?? (l.held ? 1 : 0)) + ' / ' + (l.limit ?? 1),
      l.fencingToken ?? '—',
      ms(left(entry, 'remainingMs')),
      l.waiters ?? '—',
      l.lockDelayRemainingMs ? ms(left(entry, 'lockDelayRemainingMs')) : '—',
    ];
  }

  function renderLeases() {
    const tbody = $('leases').tBodies[0];
    const entries = [...state.leases.values()].sort((a, b) => (a.lease.digest < b.lease.digest ? -1 : 1));
    for (const [digest, tr] of rows) {
      if (!state.leases.has(digest)) {
        tr.remove();
        rows.delete(digest);
      }
    }
    let previous = null;
    for (const entry of entries) {
      const digest = entry.lease.digest;
      let tr = rows.get(digest);
      if (!tr) {
        tr = document.createElement('tr');
        tr.dataset.digest = digest;
        for (let i = 0; i < 7; i++) tr.appendChild(el('td', null, i >= 4 && i !== 5 ? 'num' : ''));
        tr.cells[0].title = digest;
        rows.set(digest, tr);
      }
      leaseCells(entry).forEach((text, i) => {
        const t = String(text);
        if (tr.cells[i].textContent !== t) tr.cells[i].textContent = t;
      });
      tr.classList.toggle('selected', digest === state.selected);
      const at = previous ? previous.nextSibling : tbody.firstChild;
      if (at !== tr) tbody.insertBefore(tr, at);
      previous = tr;
    }
    if (!entries.length && !emptyRow) {
      emptyRow = row([el('td', 'No live lease.', 'muted')]);
      emptyRow.firstChild.colSpan = 7;
      tbody.appendChild(emptyRow);
    } else if (entries.length && emptyRow) {
      emptyRow.remove();
      emptyRow = null;
    }
  }

  $('leases').tBodies[0].addEventListener('click', (event) => {
    const tr = event.target.closest('tr[data-digest]');
    if (tr) selectLease(tr.dataset.digest);
  });

  // Counting down between updates.
  setInterval(() => {
    if (state.leases.size) renderLeases();
  }, 250);

  function selectLease(digest) {
    state.selected = digest;
    state.version = null;
    state.permitsShown = '';
    renderLeases();
    $('detail-panel').hidden = false;
    $('detail-digest').textContent = digest;
    $('detail').replaceChildren();
    $('permits').tBodies[0].replaceChildren();
    $('history').tBodies[0].replaceChildren();
    $('history-status').textContent = 'Loading…';
    refreshDetail();
  }

  let detailSeq = 0;
  async function refreshDetail() {
    const purpose = state.purpose;
    const digest = state.selected;
    if (!purpose || !digest) return;
    const seq = ++detailSeq;
    const inspected = await api(leasePath(purpose, digest));
    if (seq !== detailSeq || state.selected !== digest) return;
    renderDetail(inspected);
    // The history moves only when the lease's version does.
    const version = inspected.body ? inspected.body.version : undefined;
    if (state.historyAvailable && version !== undefined && version === state.version) return;
    const history = state.historyAvailable ? await api(leasePath(purpose, digest) + '/history?limit=50') : null;
    if (seq !== detailSeq || state.selected !== digest) return;
    state.version = version;
    renderHistory(history);
  }

  function renderDetail(reply) {
    const dl = $('detail');
    dl.replaceChildren();
    const pbody = $('permits').tBodies[0];
    if (reply.status !== 200) {
      dl.appendChild(el('dt', 'error'));
      dl.appendChild(el('dd', problemText(reply), 'error'));
      $('break-area').hidden = true;
      pbody.replaceChildren();
      state.permitsShown = '';
      return;
    }
    const i = reply.body;
    const entry = { lease: i, at: performance.now() };
    const facts = [
      ['held', i.held ? 'yes' : 'no'],
      ['holder', i.holder || '—'],
      ['holders', (i.holders ?? 0) + ' of ' + (i.limit ?? 1) + (i.mode ? ' (' + i.mode + ')' : '')],
      ['fencing token', i.fencingToken ?? '—'],
      ['remaining', ms(i.remainingMs)],
      ['TTL', ms(i.ttlMs)],
      ['acquired', i.acquiredAt || '—'],
      ['renewed', i.renewedAt || '—'],
      ['waiters', i.waiters ?? '—'],
      ['lock-delay', i.lockDelayRemainingMs ? ms(left(entry, 'lockDelayRemainingMs')) : 'none'],
      ['version', i.version],
    ];
    for (const [k, v] of facts) {
      dl.appendChild(el('dt', k));
      dl.appendChild(el('dd', v));
    }
    const admin = state.scopes.includes('admin');
    $('break-area').hidden = !(admin && i.held);
    const permits = i.permits || [];
    $('permits').hidden = !permits.length;
    // Rebuilt only when the permits change (a button rebuilt under the
    // pointer would swallow the click); otherwise the times are updated.
    const shown = JSON.stringify([admin, permits.map((p) => [p.fencingToken, p.holder, p.renewedAt])]);
    if (shown === state.permitsShown && pbody.rows.length === permits.length) {
      permits.forEach((p, n) => {
        pbody.rows[n].cells[2].textContent = ms(p.remainingMs);
      });
      return;
    }
    state.permitsShown = shown;
    pbody.replaceChildren();
    for (const p of permits) {
      const cell = el('td');
      if (admin && permits.length > 1) {
        const b = el('button', 'Break permit…', 'danger break-permit');
        b.type = 'button';
        b.dataset.fencingToken = String(p.fencingToken);
        b.dataset.holder = p.holder || '';
        cell.appendChild(b);
      }
      pbody.appendChild(
        row([p.holder || '—', p.fencingToken, el('td', ms(p.remainingMs), 'num'), p.acquiredAt, p.renewedAt, cell]),
      );
    }
  }

  $('permits').tBodies[0].addEventListener('click', (event) => {
    const b = event.target.closest('button.break-permit');
    if (b) askBreak(state.selected, Number(b.dataset.fencingToken), b.dataset.holder);
  });

  function renderHistory(reply) {
    const status = $('history-status');
    const tbody = $('history').tBodies[0];
    $('history').hidden = !(reply && reply.status === 200 && reply.body && (reply.body.entries || []).length);
    if (reply === null) {
      status.textContent = 'History is not available on this service.';
      return;
    }
    if (reply.status === 404 && reply.body && reply.body.outcome === 'not_found') {
      state.historyAvailable = false;
      status.textContent = 'History is not available on this service.';
      tbody.replaceChildren();
      return;
    }
    if (reply.status !== 200) {
      status.textContent = 'Could not read the history: ' + problemText(reply);
      return;
    }
    const entries = reply.body.entries || [];
    status.textContent = entries.length ? 'Newest first.' : 'No history kept for this lease.';
    tbody.replaceChildren();
    for (const e of entries) {
      const why = e.reason || (e.lockDelayMs ? 'lock-delay ' + ms(e.lockDelayMs) : '') || (e.noticed ? 'seen after expiry' : '—');
      tbody.appendChild(row([e.event, e.at, e.holder || '—', e.fencingToken ?? '—', why, e.keyName || '—']));
    }
  }

  // -------------------------------------------------------------- break --
  function askBreak(digest, fencingToken, holder) {
    state.breakTarget = { digest, fencingToken };
    $('break-what').textContent =
      fencingToken === undefined
        ? 'The whole lease ' + digest + ' of ' + state.purpose + '.'
        : 'The permit ' + fencingToken + (holder ? ' held by ' + holder : '') + ' of ' + digest + '.';
    $('break-reason').value = '';
    $('break-dialog').showModal();
  }

  $('break-lease').addEventListener('click', () => askBreak(state.selected));

  $('break-dialog').addEventListener('close', async () => {
    const target = state.breakTarget;
    state.breakTarget = null;
    if ($('break-dialog').returnValue !== 'confirm' || !target) return;
    const body = {};
    const reason = $('break-reason').value.trim();
    if (reason) body.reason = reason;
    if (target.fencingToken !== undefined) body.fencingToken = target.fencingToken;
    const reply = await api(leasePath(state.purpose, target.digest) + '/break', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (reply.status === 200) say((reply.body && reply.body.outcome) + ': ' + shortDigest(target.digest));
    else if (reply.status === 404 && reply.body && reply.body.outcome === 'not_found') {
      say('Break is not available on this service.');
    } else say('Not broken: ' + problemText(reply));
    refreshDetail();
  });

  start();
})();
