// The leasehold console. Talks only to this service, by relative URLs
// (the page is /console, so "purposes" is /purposes). No inline code: the
// page's Content-Security-Policy allows only 'self'. Everything shown is
// written with textContent, never as HTML.
'use strict';

(() => {
  const KEY = 'leasehold.apiKey';
  const POLL_MS = 500; // list polling, when the purpose stream is not there
  const OVERVIEW_MS = 10000; // the overview's lists, re-read while shown
  const HEALTH_MS = 10000; // /readyz, re-read
  const RECENT_MS = 600000; // "changed in 10 min"
  const OVERVIEW_MAX = 50; // purposes listed on the overview
  const NEAR_ZERO_MS = 1000; // a countdown this close to zero is read again
  const QUEUE_MS = 2000; // each listed lease's waiters, re-read
  const QUEUE_LEASES = 50; // leases whose waiters are read, at most
  const SESSION_MS = 2000; // the open session, re-read while shown
  const SESSION_PAGE = 100; // a session's leases per page (the API's default)
  const SESSION_LOOKUPS = 20; // sessions of a purpose's leases whose holder is read
  const SESSIONS_SHOWN = 20; // sessions in a purpose's summary, at most
  const SESSION_ID = /^s1\.[0-9a-f]{32}$/;
  const $ = (id) => document.getElementById(id);

  const state = {
    purposes: [], // [{purpose, scopes}] the key names
    any: null, // scopes on every other purpose, or null
    seen: [], // purposes the service has served (keys for every purpose)
    version: '',
    access: '',
    purpose: null, // null: the overview
    scopes: [],
    leases: new Map(), // digest -> {lease, at}
    selected: null, // digest
    feed: null, // AbortController of the stream or poll loop
    feedKind: '',
    historyAvailable: true,
    breakTarget: null, // {digest, fencingToken?}
    leaseVersion: null, // of the selected lease, when its history was read
    permitsShown: '', // what the permits table shows
    overview: new Map(), // purpose -> {leases, at} or {error}
    reread: new Map(), // digest -> when a near-zero countdown was read again
    queues: new Map(), // digest -> {waiting, complete, head, at}: its waiters
    waitersAvailable: true, // the service answers GET …/waiters
    detailQueue: null, // the selected lease's waiters {body, at}
    session: null, // the open session view: {id, cursors, page, live, lost}
    sessionInfo: new Map(), // session id -> {holder} or {gone}: the summary's labels
    summaryShown: '', // what the sessions summary shows
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
  // A duration for people: "0.4 s", "28.3 s", "12 min 3 s", "3 h 12 min", "2 d 3 h".
  function dur(value) {
    if (value === undefined || value === null || Number.isNaN(value)) return '—';
    if (value < 0) value = 0;
    if (value < 60000) return (Math.floor(value / 100) / 10).toFixed(1) + ' s';
    const s = Math.floor(value / 1000);
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  const pad = (n) => String(n).padStart(2, '0');

  // "2026-12-05 18:03:12" in the browser's zone, and the same in UTC.
  function stamp(iso) {
    const t = new Date(iso);
    if (Number.isNaN(t.getTime())) return null;
    const local = `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`;
    const utc = `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())} ${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())} UTC`;
    return { local, utc, ms: t.getTime() };
  }

  // A <span> with the local time, UTC beside it, and an age or a countdown.
  function when(iso, relative) {
    const s = iso ? stamp(iso) : null;
    if (!s) return el('span', '—');
    const span = el('span');
    const time = el('time', s.local);
    time.dateTime = iso;
    span.appendChild(time);
    span.appendChild(document.createTextNode(' '));
    span.appendChild(el('span', '(' + s.utc + ')', 'utc'));
    if (relative) span.appendChild(document.createTextNode(' · ' + relative(s.ms - Date.now())));
    return span;
  }

  const ago = (delta) => dur(-delta) + ' ago';
  const ahead = (delta) => (delta >= 0 ? 'in ' + dur(delta) : dur(-delta) + ' ago');
  const since = (iso) => (iso && stamp(iso) ? Date.now() - stamp(iso).ms : undefined);

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

  function setText(node, text) {
    const t = String(text);
    if (node.textContent !== t) node.textContent = t;
  }

  // Remaining time counts down from when the figure arrived.
  function left(entry, field) {
    const v = entry.lease[field];
    if (v === undefined || v === null) return undefined;
    return v - (performance.now() - entry.at);
  }

  // Whether a lease is held (a list's entries say so by their holders).
  function isHeld(l) {
    return l.held ?? ((l.holders ?? 0) > 0 || l.fencingToken !== undefined);
  }

  // The first permit's hold bound (when the lease has one).
  function holdEnd(lease) {
    const p = (lease.permits || []).find((x) => x.holdEndsAt);
    return p ? { at: p.holdEndsAt, max: p.maxHoldMs } : null;
  }

  // The session a lease is on (docs/sessions.md): a listing names it on
  // the lease, inspect and the stream's events on its permits.
  function sessionOf(l) {
    if (l.session) return l.session;
    const p = (l.permits || []).find((x) => x.session);
    return p ? p.session : null;
  }

  const shortSession = (id) => (id.length > 12 ? id.slice(0, 11) + '…' : id);

  // A button opening a session's view (the listeners of its container
  // handle `button.session-link`).
  function sessionButton(id) {
    const b = el('button', shortSession(id), 'session-link');
    b.type = 'button';
    b.title = id;
    b.dataset.session = id;
    b.setAttribute('aria-label', 'Session ' + id);
    return b;
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
    closeSession();
    state.purpose = null;
    state.overview.clear();
    showKeyForm('');
  });

  // ------------------------------------------------------------- health --
  async function health() {
    const out = $('health');
    let reply = null;
    try {
      reply = await api('readyz');
    } catch (_) {
      reply = null;
    }
    out.replaceChildren();
    const item = (label, value, cls) => {
      const s = el('span');
      s.appendChild(document.createTextNode(label + ': '));
      s.appendChild(el('span', value, cls));
      out.appendChild(s);
    };
    if (!reply) item('service', 'not answering', 'bad');
    else if (reply.status === 200 && reply.body) {
      const b = reply.body;
      item('store', b.status + ' (' + b.topology + (b.writable ? ', writable' : '') + ')', 'good');
      item('auth', b.auth === 'keys' ? 'API keys' : 'open');
      item('this instance', (b.waiters ?? 0) + ' waiting, ' + (b.watchers ?? 0) + ' watching');
    } else item('store', 'not ready: ' + problemText(reply), 'bad');
    if (state.version) item('version', state.version);
    roster();
  }

  // The instances sharing the store, from the roster each beats into
  // every 5 s (GET /instances; the embedded store: just this one). Hidden
  // where the service has no such route (an older release).
  async function roster() {
    const out = $('roster');
    let reply = null;
    try {
      reply = await api('instances');
    } catch (_) {
      reply = null;
    }
    out.hidden = reply?.status === 404;
    if (reply?.status !== 200 || !reply.body) {
      out.textContent = 'instances: ' + (reply ? problemText(reply) : 'not answering');
      return;
    }
    const list = reply.body.instances || [];
    out.textContent = `instances sharing the store (${list.length}): ` + list
      .map((i) => `${i.instance} (${i.thisInstance ? 'this one, ' : ''}${i.version}, started ${stamp(i.startedAt)?.local ?? '—'}, beat ${dur(i.lastBeatAgeMs)} ago)`)
      .join(', ');
  }

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
    state.seen = b.seen || [];
    state.version = b.version || '';
    state.access = b.access;
    $('key-panel').hidden = true;
    $('main').hidden = false;
    const keyed = b.access === 'keys';
    $('forget').hidden = !keyed;
    $('who').textContent = keyed ? 'API key in use (kept in this tab)' : 'open API (no keys configured)';
    health();
    if (state.session) openSession(state.session.id);
    else if (state.purpose) selectPurpose(state.purpose);
    else showOverview();
  }

  // The purposes to offer: those the key names, and for a key on every
  // purpose those the service has served.
  function offered() {
    const names = state.purposes.map((p) => p.purpose);
    if (state.any) for (const p of state.seen) if (!names.includes(p)) names.push(p);
    return names.sort();
  }

  function scopesOf(purpose) {
    const named = state.purposes.find((p) => p.purpose === purpose);
    if (named) return named.scopes;
    return state.any || [];
  }

  function renderPurposes() {
    const ul = $('purposes');
    ul.replaceChildren();
    const add = (label, purpose, scopes, onClick) => {
      const b = el('button');
      b.type = 'button';
      if (purpose) b.dataset.purpose = purpose;
      else b.id = 'to-overview';
      b.appendChild(el('span', label));
      if (scopes) b.appendChild(el('span', scopes, 'scopes'));
      if ((purpose || null) === state.purpose && !state.session) b.setAttribute('aria-current', 'page');
      b.addEventListener('click', onClick);
      const li = el('li');
      li.appendChild(b);
      ul.appendChild(li);
    };
    add('Overview', null, null, showOverview);
    for (const p of offered()) add(p, p, scopesOf(p).join(' '), () => selectPurpose(p));
    if (!offered().length && !state.any) ul.appendChild(el('li', 'This key may read no purpose.', 'muted'));
    $('other-purpose').hidden = !state.any;
  }

  $('other-purpose').addEventListener('submit', (event) => {
    event.preventDefault();
    const p = $('other-input').value.trim();
    if (/^[a-z][a-z0-9-]{0,62}$/.test(p)) selectPurpose(p);
    else say('A purpose is a lowercase letter, then up to 62 of a-z, 0-9 and -.');
  });

  // ----------------------------------------------------------- overview --
  let overviewTimer = null;

  function showOverview() {
    stopFeed();
    closeSession();
    $('instances').hidden = true;
    state.purpose = null;
    state.selected = null;
    $('overview-panel').hidden = false;
    $('leases-panel').hidden = true;
    $('detail-panel').hidden = true;
    renderPurposes();
    loadOverview();
  }

  async function loadOverview() {
    clearTimeout(overviewTimer);
    const names = offered().slice(0, OVERVIEW_MAX);
    $('overview-status').textContent = names.length
      ? offered().length > OVERVIEW_MAX
        ? `The first ${OVERVIEW_MAX} of ${offered().length} purposes.`
        : ''
      : 'No purpose to show yet' + (state.any ? ': this key may open any purpose by name.' : '.');
    await Promise.all(
      names.map(async (p) => {
        try {
          const reply = await api(leasePath(p) + '?limit=1000');
          const at = performance.now();
          if (reply.status === 200 && reply.body) state.overview.set(p, { leases: reply.body.leases || [], at, more: !!reply.body.nextCursor });
          else state.overview.set(p, { error: problemText(reply) });
        } catch (e) {
          state.overview.set(p, { error: e.message });
        }
      }),
    );
    if (state.purpose !== null || state.session) return;
    renderOverview(names);
    overviewTimer = setTimeout(() => {
      if (state.purpose === null && !state.session && !$('main').hidden) loadOverview();
    }, OVERVIEW_MS);
  }

  function renderOverview(names) {
    const tbody = $('overview').tBodies[0];
    tbody.replaceChildren();
    const activity = [];
    for (const p of names) {
      const o = state.overview.get(p) || { leases: [] };
      const open = el('button', p);
      open.type = 'button';
      open.addEventListener('click', () => selectPurpose(p));
      if (o.error) {
        const cell = el('td', o.error, 'error');
        cell.colSpan = 3;
        tbody.appendChild(row([open, cell, scopesOf(p).join(' ')]));
        continue;
      }
      const held = o.leases.filter(isHeld).length;
      const delayed = o.leases.filter((l) => !isHeld(l) && l.lockDelayRemainingMs).length;
      const recent = o.leases.filter((l) => since(l.acquiredAt) < RECENT_MS).length;
      const tr = row([open, el('td', held + (o.more ? '+' : ''), 'num'), el('td', delayed, 'num'), el('td', recent, 'num'), scopesOf(p).join(' ')]);
      tr.dataset.purpose = p;
      tbody.appendChild(tr);
      for (const l of o.leases) if (l.acquiredAt) activity.push({ p, l });
    }
    activity.sort((a, b) => (a.l.acquiredAt < b.l.acquiredAt ? 1 : -1));
    const ul = $('activity');
    ul.replaceChildren();
    for (const { p, l } of activity.slice(0, 12)) {
      const li = el('li');
      li.appendChild(document.createTextNode(`${p}: ${l.holder || 'a holder'} acquired ${shortDigest(l.digest)} `));
      li.appendChild(when(l.acquiredAt, ago));
      if (l.renewedAt && l.renewedAt !== l.acquiredAt) li.appendChild(document.createTextNode(', renewed ' + ago(-since(l.renewedAt))));
      ul.appendChild(li);
    }
    if (!activity.length) ul.appendChild(el('li', 'No live lease in these purposes.', 'muted'));
  }

  // "v1." and the SHA-256 of a raw id, in hex (WebCrypto: HTTPS or localhost).
  async function digestOf(raw) {
    if (!(window.crypto && crypto.subtle)) return null;
    const hash = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(raw));
    return 'v1.' + [...new Uint8Array(hash)].map((b) => b.toString(16).padStart(2, '0')).join('');
  }

  $('search-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const q = $('search-input').value.trim();
    const status = $('search-status');
    const tbody = $('search-results').tBodies[0];
    tbody.replaceChildren();
    $('search-wrap').hidden = true;
    if (!q) {
      status.textContent = '';
      return;
    }
    status.textContent = 'Searching…';
    const raw = await digestOf(q);
    if (state.purpose === null) await loadOverview();
    const found = new Map(); // purpose + digest -> {p, lease, matched}
    const lower = q.toLowerCase();
    // A session id, whole or its first digits as the lists show it.
    const session = /^s1\.[0-9a-f]{4,32}…?$/.test(lower) ? lower.replace('…', '') : null;
    const names = offered().slice(0, OVERVIEW_MAX);
    for (const p of names) {
      for (const l of (state.overview.get(p) || {}).leases || []) {
        let matched = '';
        if (raw && l.digest === raw) matched = 'raw id';
        else if (l.digest.includes(lower)) matched = 'digest';
        else if (session && (sessionOf(l) || '').startsWith(session)) matched = 'session';
        else if ((l.holder || '').toLowerCase().includes(lower) || (l.permits || []).some((x) => (x.holder || '').toLowerCase().includes(lower))) matched = 'holder';
        if (matched) found.set(p + ' ' + l.digest, { p, lease: l, matched });
      }
    }
    // A raw id's lease beyond a listed page: inspect it where it may be.
    if (raw) {
      await Promise.all(
        names
          .filter((p) => !found.has(p + ' ' + raw))
          .map(async (p) => {
            const reply = await api(leasePath(p, raw)).catch(() => null);
            if (reply && reply.status === 200 && reply.body && reply.body.held) found.set(p + ' ' + raw, { p, lease: Object.assign({ digest: raw }, reply.body), matched: 'raw id' });
          }),
      );
    }
    for (const { p, lease, matched } of found.values()) {
      const open = el('button', shortDigest(lease.digest));
      open.type = 'button';
      open.title = lease.digest;
      open.addEventListener('click', () => selectPurpose(p, lease.digest));
      const on = sessionOf(lease);
      const tr = row([p, open, lease.holder || '—', el('td', dur(lease.remainingMs), 'num'), on ? sessionButton(on) : '—', matched]);
      tr.dataset.digest = lease.digest;
      tbody.appendChild(tr);
    }
    $('search-wrap').hidden = !found.size;
    status.textContent =
      (found.size ? found.size + ' found' : 'Nothing found') +
      (raw ? '; raw id ' + JSON.stringify(q) + ' is ' + raw : '; raw-id search needs WebCrypto (HTTPS or localhost)') +
      '.';
  });

  $('search-results').addEventListener('click', (event) => {
    const b = event.target.closest('button.session-link');
    if (b) openSession(b.dataset.session);
  });

  // -------------------------------------------------------------- feeds --
  function selectPurpose(purpose, digest) {
    stopFeed();
    closeSession();
    clearTimeout(overviewTimer);
    state.purpose = purpose;
    state.scopes = scopesOf(purpose);
    state.leases.clear();
    state.reread.clear();
    state.selected = null;
    state.leaseVersion = null;
    $('overview-panel').hidden = true;
    $('leases-panel').hidden = false;
    $('detail-panel').hidden = true;
    $('leases-title').textContent = 'Leases of ' + purpose;
    state.queues.clear();
    state.sessionInfo.clear();
    state.summaryShown = '';
    renderInstances(purpose);
    renderPurposes();
    renderLeases();
    renderLongest();
    startFeed(purpose);
    if (digest) selectLease(digest);
    loadQueues(purpose);
  }

  function stopFeed() {
    if (state.feed) state.feed.abort();
    state.feed = null;
    clearTimeout(queueTimer);
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

  // One lease's new state (an event, a re-read): shown, or gone.
  function put(lease, at) {
    if (isHeld(lease) || lease.lockDelayRemainingMs) state.leases.set(lease.digest, { lease, at });
    else state.leases.delete(lease.digest);
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
    // Every other event (acquired, released, expired, holder_changed,
    // revoked, renewed) carries the lease's new state.
    if (body.digest) {
      put(body, now);
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

  // A countdown near zero is read again rather than trusted: a renewal
  // through another instance reaches the stream only when the service
  // reads the lease (docs/watching.md), and this shows no lease at zero
  // that its holder keeps renewing. At most once a second per lease.
  function rereadNearZero() {
    if (state.feedKind !== 'stream' || !state.purpose) return;
    const purpose = state.purpose;
    const now = performance.now();
    for (const [digest, entry] of state.leases) {
      const l = left(entry, 'remainingMs');
      if (!isHeld(entry.lease) || l === undefined || l > NEAR_ZERO_MS) continue;
      if (now - (state.reread.get(digest) || -Infinity) < 1000) continue;
      state.reread.set(digest, now);
      api(leasePath(purpose, digest))
        .then((reply) => {
          if (state.purpose !== purpose || reply.status !== 200 || !reply.body) return;
          const current = state.leases.get(digest);
          // An event that came meanwhile is as fresh: keep it.
          if (current && current.at > now) return;
          put(Object.assign({ digest }, reply.body), performance.now());
          renderLeases();
        })
        .catch(() => {});
    }
  }

  // ------------------------------------------------------------- leases --
  // Rows are kept per digest and updated in place (a row rebuilt under the
  // pointer would swallow the click); one listener serves them all.
  const rows = new Map(); // digest -> tr
  let emptyRow = null;
  const COLUMNS = 9;
  const SESSION_COLUMN = 8;

  function leaseCells(entry) {
    const l = entry.lease;
    const live = isHeld(l);
    const held = live ? since(l.acquiredAt) : undefined;
    const renewed = live ? since(l.renewedAt) : undefined;
    return [
      null, // the digest's button, set once
      l.holder || '—',
      (l.holders ?? (live ? 1 : 0)) + ' / ' + (l.limit ?? 1) + (l.mode && l.mode !== 'exclusive' ? ' ' + l.mode : ''),
      live ? dur(left(entry, 'remainingMs')) : 'free',
      held === undefined ? '—' : dur(held),
      renewed === undefined ? '—' : dur(renewed) + ' ago',
      l.lockDelayRemainingMs ? dur(left(entry, 'lockDelayRemainingMs')) : '—',
      queueCell(l.digest),
      null, // the session's button (setSessionCell)
    ];
  }

  // ------------------------------------------------------------ waiters --
  // Each listed lease's waiters (how many, the first), read every QUEUE_MS
  // for at most QUEUE_LEASES leases: the waiters column and the purpose's
  // longest waits. The selected lease's whole queue is read with it.
  let queueTimer = null;

  function queueCell(digest) {
    const q = state.queues.get(digest);
    if (!state.waitersAvailable) return 'n/a';
    if (!q) return '…';
    return String(q.waiting) + (q.complete ? '' : '+');
  }

  function waitersPath(purpose, digest, limit) {
    return leasePath(purpose, digest) + '/waiters?limit=' + limit;
  }

  async function loadQueues(purpose) {
    clearTimeout(queueTimer);
    if (state.purpose !== purpose || !state.waitersAvailable) return;
    const digests = [...state.leases.keys()].sort().slice(0, QUEUE_LEASES);
    await Promise.all(
      digests.map(async (digest) => {
        const reply = await api(waitersPath(purpose, digest, 1)).catch(() => null);
        if (state.purpose !== purpose || !reply) return;
        if (reply.status === 404 && reply.body && reply.body.outcome === 'not_found') {
          state.waitersAvailable = false;
          return;
        }
        if (reply.status !== 200 || !reply.body) return;
        const b = reply.body;
        state.queues.set(digest, { waiting: b.waiting, complete: b.complete, head: (b.waiters || [])[0], instances: b.instances || [], at: performance.now() });
      }),
    );
    if (state.purpose !== purpose) return;
    for (const digest of state.queues.keys()) if (!state.leases.has(digest)) state.queues.delete(digest);
    renderInstances(purpose);
    renderLeases();
    renderLongest();
    if (state.selected) refreshWaiters();
    queueTimer = setTimeout(() => loadQueues(purpose), QUEUE_MS);
  }

  // Health beside the data: the instances sharing the store that have
  // waiters in this purpose's queues, from their heartbeats there (Redis;
  // an instance's heartbeat lives only in the queues it waits in).
  function renderInstances(purpose) {
    const out = $('instances');
    const seen = new Map();
    for (const q of state.queues.values()) {
      for (const i of q.instances || []) {
        const was = seen.get(i.instance);
        if (!was || was.heartbeatAgeMs > i.heartbeatAgeMs) seen.set(i.instance, i);
      }
    }
    out.hidden = !seen.size;
    const list = [...seen.values()].sort((a, b) => (a.instance < b.instance ? -1 : 1));
    out.textContent = seen.size
      ? `instances with waiters in ${purpose}: ` + list.map((i) => `${i.instance} (heartbeat ${dur(i.heartbeatAgeMs)} ago)`).join(', ')
      : '';
  }

  // A waiter's time waited, counted on from when it was read.
  const waitedNow = (w, at) => w.waitedMs + (performance.now() - at);

  function renderLongest() {
    const ul = $('longest');
    ul.replaceChildren();
    if (!state.waitersAvailable) {
      $('longest-status').textContent = 'Waiters are not available on this service.';
      return;
    }
    const heads = [...state.queues.entries()].filter(([, q]) => q.head).sort((a, b) => waitedNow(b[1].head, b[1].at) - waitedNow(a[1].head, a[1].at));
    $('longest-status').textContent = heads.length ? 'The first waiter of each lease, longest first.' : 'Nobody waits.';
    for (const [digest, q] of heads.slice(0, 5)) {
      const li = el('li');
      li.dataset.digest = digest;
      const open = el('button', shortDigest(digest));
      open.type = 'button';
      open.title = digest;
      open.addEventListener('click', () => selectLease(digest));
      li.appendChild(open);
      const who = (q.head.holder || 'a waiter') + ' on ' + q.head.instance;
      li.appendChild(document.createTextNode(` ${who}, waiting ${dur(waitedNow(q.head, q.at))}` + (q.waiting > 1 ? ` (${q.waiting} waiting)` : '')));
      ul.appendChild(li);
    }
  }

  async function refreshWaiters() {
    const purpose = state.purpose;
    const digest = state.selected;
    if (!purpose || !digest) return;
    if (!state.waitersAvailable) {
      $('waiters-status').textContent = 'Waiters are not available on this service.';
      $('waiters').hidden = true;
      return;
    }
    const reply = await api(waitersPath(purpose, digest, 20)).catch(() => null);
    if (state.purpose !== purpose || state.selected !== digest) return;
    if (!reply || reply.status !== 200 || !reply.body) {
      $('waiters-status').textContent = 'Could not read the waiters' + (reply ? ': ' + problemText(reply) : '.');
      return;
    }
    state.detailQueue = { body: reply.body, at: performance.now() };
    renderWaiters();
  }

  function renderWaiters() {
    const q = state.detailQueue;
    const tbody = $('waiters').tBodies[0];
    if (!q) return;
    const list = q.body.waiters || [];
    $('waiters').hidden = !list.length;
    const count = q.body.waiting + (q.body.complete ? '' : '+');
    $('waiters-status').textContent = list.length
      ? `${count} waiting, in the order they will acquire` + (list.length < q.body.waiting ? ` (the first ${list.length} shown)` : '') + '.'
      : 'Nobody waits.';
    // The instances they wait on, from their heartbeats (Redis).
    const beats = (q.body.instances || []).map((i) => i.instance + ' (heartbeat good for ' + dur(i.aliveForMs) + ')');
    if (beats.length) $('waiters-status').textContent += ' Waiting on ' + beats.join(', ') + '.';
    tbody.replaceChildren();
    for (const w of list) {
      const tr = row([el('td', w.position, 'num'), w.holder || '—', el('code', w.instance), w.mode, when(w.since), el('td', 'waiting ' + dur(waitedNow(w, q.at)), 'num waited')]);
      tr.dataset.position = String(w.position);
      tbody.appendChild(tr);
    }
  }

  // The waited times count on between reads.
  function tickWaiters() {
    const q = state.detailQueue;
    if (!q || $('detail-panel').hidden) return;
    const cells = $('waiters').querySelectorAll('td.waited');
    (q.body.waiters || []).forEach((w, n) => {
      if (cells[n]) setText(cells[n], 'waiting ' + dur(waitedNow(w, q.at)));
    });
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
        for (let i = 0; i < COLUMNS; i++) tr.appendChild(el('td', null, i >= 3 && i < SESSION_COLUMN ? 'num' : ''));
        const open = el('button', shortDigest(digest));
        open.type = 'button';
        open.title = digest;
        open.setAttribute('aria-label', 'Lease ' + digest);
        tr.cells[0].appendChild(open);
        rows.set(digest, tr);
      }
      leaseCells(entry).forEach((text, i) => {
        if (text !== null) setText(tr.cells[i], text);
      });
      setSessionCell(tr.cells[SESSION_COLUMN], isHeld(entry.lease) ? sessionOf(entry.lease) : null);
      tr.classList.toggle('selected', digest === state.selected);
      const at = previous ? previous.nextSibling : tbody.firstChild;
      if (at !== tr) tbody.insertBefore(tr, at);
      previous = tr;
    }
    if (!entries.length && !emptyRow) {
      emptyRow = row([el('td', 'No live lease.', 'muted')]);
      emptyRow.firstChild.colSpan = COLUMNS;
      tbody.appendChild(emptyRow);
    } else if (entries.length && emptyRow) {
      emptyRow.remove();
      emptyRow = null;
    }
    renderSessionSummary();
  }

  // A lease row's session cell: its session's button, rebuilt only when the
  // session changes (a button rebuilt under the pointer swallows the click).
  function setSessionCell(td, id) {
    if (td.dataset.session === (id || '') && td.firstChild) return;
    td.dataset.session = id || '';
    td.replaceChildren(id ? sessionButton(id) : document.createTextNode('—'));
  }

  // ----------------------------------------------------------- sessions --
  // The listed leases grouped by session: how many of them each holds, and
  // the session's holder label, read once per session (GET /sessions/{id},
  // for at most SESSION_LOOKUPS sessions). Only what the list already holds.
  function renderSessionSummary() {
    const counts = new Map();
    for (const entry of state.leases.values()) {
      const id = isHeld(entry.lease) ? sessionOf(entry.lease) : null;
      if (id) counts.set(id, (counts.get(id) || 0) + 1);
    }
    const groups = [...counts.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    for (const [id] of groups.slice(0, SESSIONS_SHOWN)) lookUpSession(id);
    const shown = groups.slice(0, SESSIONS_SHOWN).map(([id, n]) => [id, n, state.sessionInfo.get(id) || null]);
    const key = JSON.stringify([shown, groups.length]);
    if (key === state.summaryShown) return;
    state.summaryShown = key;
    const ul = $('sessions-summary');
    ul.replaceChildren();
    $('sessions-status').textContent = groups.length
      ? `The listed leases by session (${groups.length})` + (groups.length > SESSIONS_SHOWN ? `, the ${SESSIONS_SHOWN} with most leases shown.` : '.')
      : 'No listed lease is on a session.';
    for (const [id, n, info] of shown) {
      const li = el('li');
      li.dataset.session = id;
      li.appendChild(sessionButton(id));
      const holder = info && info.holder ? info.holder : info && info.gone ? null : '';
      const label = holder ? ' ' + holder : holder === '' ? '' : ' (' + info.gone + ')';
      li.appendChild(document.createTextNode(`${label} · ${n} of the listed lease${n === 1 ? '' : 's'}`));
      ul.appendChild(li);
    }
  }

  function lookUpSession(id) {
    if (state.sessionInfo.has(id) || state.sessionInfo.size >= SESSION_LOOKUPS) return;
    const purpose = state.purpose;
    state.sessionInfo.set(id, { pending: true });
    api('sessions/' + encodeURIComponent(id) + '?limit=1')
      .then((reply) => {
        if (state.purpose !== purpose) return;
        if (reply.status === 200 && reply.body && reply.body.session) state.sessionInfo.set(id, { holder: reply.body.session.holder || '' });
        else if (reply.status === 404 && reply.body && reply.body.outcome === 'lost') state.sessionInfo.set(id, { gone: goneWord(reply.body.reason) });
        else state.sessionInfo.set(id, { holder: '' });
        renderSessionSummary();
      })
      .catch(() => {});
  }

  function goneWord(reason) {
    if (reason === 'session_ended') return 'ended';
    if (reason === 'session_expired') return 'expired';
    return 'not found';
  }

  $('leases-panel').addEventListener('click', (event) => {
    const b = event.target.closest('button.session-link');
    if (b) {
      event.stopPropagation();
      openSession(b.dataset.session);
    }
  }, true);

  $('leases').tBodies[0].addEventListener('click', (event) => {
    if (event.target.closest('button.session-link')) return;
    const tr = event.target.closest('tr[data-digest]');
    if (tr) selectLease(tr.dataset.digest);
  });

  // Counting down between updates.
  setInterval(() => {
    if (state.leases.size && state.purpose) {
      rereadNearZero();
      renderLeases();
      tickDetail();
      tickWaiters();
    }
    if (state.session) tickSession();
  }, 250);

  setInterval(() => {
    if (!$('main').hidden) health();
  }, HEALTH_MS);

  function selectLease(digest) {
    state.selected = digest;
    state.leaseVersion = null;
    state.permitsShown = '';
    renderLeases();
    $('detail-panel').hidden = false;
    $('detail-digest').textContent = digest;
    $('detail').replaceChildren();
    $('permits').tBodies[0].replaceChildren();
    $('history').tBodies[0].replaceChildren();
    $('history-status').textContent = 'Loading…';
    state.detailQueue = null;
    $('waiters').tBodies[0].replaceChildren();
    $('waiters').hidden = true;
    $('waiters-status').textContent = 'Loading…';
    refreshDetail();
    refreshWaiters();
  }

  let detailSeq = 0;
  let detailEntry = null; // the selected lease as last read, counting down
  let detailSessions = null; // {key, span}: the session buttons shown
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
    if (state.historyAvailable && version !== undefined && version === state.leaseVersion) return;
    const history = state.historyAvailable ? await api(leasePath(purpose, digest) + '/history?limit=50') : null;
    if (seq !== detailSeq || state.selected !== digest) return;
    state.leaseVersion = version;
    renderHistory(history);
  }

  function fact(dl, key, value, id) {
    dl.appendChild(el('dt', key));
    const dd = value instanceof Node ? wrap('dd', value) : el('dd', value);
    if (id) dd.id = id;
    dl.appendChild(dd);
  }

  function wrap(tag, node) {
    const e = document.createElement(tag);
    e.appendChild(node);
    return e;
  }

  function renderDetail(reply) {
    const dl = $('detail');
    dl.replaceChildren();
    const pbody = $('permits').tBodies[0];
    detailEntry = null;
    if (reply.status !== 200) {
      fact(dl, 'error', problemText(reply));
      $('break-area').hidden = true;
      pbody.replaceChildren();
      state.permitsShown = '';
      return;
    }
    const i = reply.body;
    const entry = { lease: i, at: performance.now() };
    detailEntry = entry;
    const bound = holdEnd(i);
    fact(dl, 'held', i.held ? 'yes' : 'no');
    fact(dl, 'holder', i.holder || '—');
    fact(dl, 'holders', (i.holders ?? 0) + ' of ' + (i.limit ?? 1));
    fact(dl, 'limit and mode', 'limit ' + (i.limit ?? 1) + ', ' + (i.mode || 'exclusive'));
    fact(dl, 'fencing token', i.fencingToken ?? '—');
    fact(dl, 'remaining', i.held ? dur(i.remainingMs) : '—', 'detail-remaining');
    fact(dl, 'TTL', dur(i.ttlMs));
    fact(dl, 'acquired', when(i.acquiredAt, (d) => 'held ' + dur(-d)));
    fact(dl, 'renewed', when(i.renewedAt, ago));
    fact(dl, 'hold ends', bound ? when(bound.at, ahead) : 'no bound');
    fact(dl, 'max hold', bound && bound.max ? dur(bound.max) : 'none');
    // A lease on a session (docs/sessions.md) ends when its session does.
    const sessions = [...new Set((i.permits || []).map((p) => p.session).filter(Boolean))];
    if (sessions.length) {
      // The same buttons while the sessions stay (the facts are rebuilt on
      // every event; a button rebuilt under the pointer swallows the click).
      const key = sessions.join(' ');
      if (!detailSessions || detailSessions.key !== key) {
        const span = el('span');
        for (const id of sessions) {
          span.appendChild(sessionButton(id));
          span.appendChild(document.createTextNode(' '));
        }
        span.appendChild(document.createTextNode('(ends with it)'));
        detailSessions = { key, span };
      }
      fact(dl, 'session', detailSessions.span, 'detail-session');
    } else fact(dl, 'session', 'none', 'detail-session');
    // A running lock-delay (after an expiry), or the one a held permit's
    // expiry would start (a release or a break starts none).
    const delay = i.lockDelayRemainingMs;
    const planned = (i.permits || []).find((p) => p.lockDelayMs);
    const would = planned ? dur(planned.lockDelayMs) + ', starts if it expires (not on release)' : 'none';
    fact(dl, 'lock-delay', delay ? dur(delay) + ' left' : would, 'detail-delay');
    fact(dl, 'lock-delay ends', delay ? when(new Date(Date.now() + delay).toISOString(), ahead) : planned && i.held ? 'not started: held' : '—');
    fact(dl, 'version', i.version);
    const admin = state.scopes.includes('admin');
    $('break-area').hidden = !(admin && i.held);
    const permits = i.permits || [];
    $('permits').hidden = !permits.length;
    // Rebuilt only when the permits change (a button rebuilt under the
    // pointer would swallow the click); otherwise the times are updated.
    const shown = JSON.stringify([admin, permits.map((p) => [p.fencingToken, p.holder, p.renewedAt])]);
    if (shown === state.permitsShown && pbody.rows.length === permits.length) {
      permits.forEach((p, n) => {
        setText(pbody.rows[n].cells[2], dur(p.remainingMs));
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
        row([
          p.holder || '—',
          p.fencingToken,
          el('td', dur(p.remainingMs), 'num'),
          when(p.acquiredAt, (d) => 'held ' + dur(-d)),
          when(p.renewedAt, ago),
          p.holdEndsAt ? when(p.holdEndsAt, ahead) : 'no bound',
          cell,
        ]),
      );
    }
  }

  // The selected lease's countdowns between reads.
  function tickDetail() {
    if (!detailEntry || $('detail-panel').hidden) return;
    const remaining = $('detail-remaining');
    if (remaining && detailEntry.lease.held) setText(remaining, dur(left(detailEntry, 'remainingMs')));
    const delay = $('detail-delay');
    if (delay && detailEntry.lease.lockDelayRemainingMs) setText(delay, dur(left(detailEntry, 'lockDelayRemainingMs')) + ' left');
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
      const why = e.reason || (e.lockDelayMs ? 'lock-delay ' + dur(e.lockDelayMs) : '') || (e.noticed ? 'seen after expiry' : '—');
      tbody.appendChild(row([e.event, when(e.at, ago), e.holder || '—', e.fencingToken ?? '—', why, e.keyName || '—']));
    }
  }

  // -------------------------------------------------------------- break --
  function askBreak(digest, fencingToken, holder) {
    state.breakTarget = { digest, fencingToken };
    const entry = state.leases.get(digest);
    const who = entry && entry.lease.holder ? ' held by ' + entry.lease.holder : '';
    $('break-what').textContent =
      fencingToken === undefined
        ? 'The whole lease ' + digest + who + ' of ' + state.purpose + '.'
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

  // ------------------------------------------------------- session view --
  // One session (GET /sessions/{id}, read scope, no secret): whether it
  // lives (or ended or expired, and why), its holder label, TTL and
  // expiry, how many leases it holds, and a page of them (each opening
  // that lease), paged by `nextCursor`. Re-read every SESSION_MS while
  // shown, and by "Read again"; a lost one is not re-read on its own.
  let sessionTimer = null;
  let sessionSeq = 0;

  function closeSession() {
    clearTimeout(sessionTimer);
    state.session = null;
    $('session-panel').hidden = true;
  }

  function openSession(id) {
    if (!SESSION_ID.test(id || '')) {
      say('A session id is s1. and 32 lowercase hex digits.');
      return;
    }
    say('');
    stopFeed();
    clearTimeout(overviewTimer);
    clearTimeout(sessionTimer);
    state.purpose = null;
    state.selected = null;
    state.session = { id, cursors: [null], page: 0, live: null, lost: null, shown: '' };
    $('overview-panel').hidden = true;
    $('leases-panel').hidden = true;
    $('detail-panel').hidden = true;
    $('instances').hidden = true;
    $('session-panel').hidden = false;
    $('session-id').textContent = id;
    $('session-state').textContent = 'Reading…';
    $('session-state').className = '';
    delete $('session-state').dataset.state;
    $('session-facts').replaceChildren();
    $('session-leases').tBodies[0].replaceChildren();
    $('session-leases').hidden = true;
    $('session-leases-status').textContent = '';
    $('session-prev').hidden = true;
    $('session-next').hidden = true;
    renderPurposes();
    loadSession();
  }

  async function loadSession() {
    clearTimeout(sessionTimer);
    const view = state.session;
    if (!view) return;
    const seq = ++sessionSeq;
    const cursor = view.cursors[view.page];
    const path = 'sessions/' + encodeURIComponent(view.id) + '?limit=' + SESSION_PAGE + (cursor ? '&cursor=' + encodeURIComponent(cursor) : '');
    let reply = null;
    try {
      reply = await api(path);
    } catch (_) {
      reply = null;
    }
    if (seq !== sessionSeq || state.session !== view) return;
    renderSession(view, reply);
    if (!view.lost) {
      sessionTimer = setTimeout(() => {
        if (state.session === view && !$('main').hidden) loadSession();
      }, SESSION_MS);
    }
  }

  function sessionState(word, text, cls) {
    const out = $('session-state');
    out.dataset.state = word;
    out.className = cls || '';
    setText(out, text);
  }

  function renderSession(view, reply) {
    const status = $('session-leases-status');
    const tbody = $('session-leases').tBodies[0];
    if (!reply) {
      sessionState('error', 'The service did not answer; showing the last read.', 'error');
      return;
    }
    if (reply.status === 404 && reply.body && reply.body.outcome === 'lost') {
      // Ended, expired, or unknown: said plainly, with what was last seen.
      const word = goneWord(reply.body.reason);
      view.lost = { word, reason: reply.body.reason || '', at: Date.now() };
      const lead = { ended: 'Ended', expired: 'Expired' }[word] || 'Not found';
      sessionState({ ended: 'ended', expired: 'expired' }[word] || 'absent', `${lead} (${view.lost.reason || 'lost'}): ${problemText(reply)}`, 'ended');
      renderSessionFacts(view);
      tbody.replaceChildren();
      view.shown = '';
      $('session-leases').hidden = true;
      $('session-prev').hidden = true;
      $('session-next').hidden = true;
      status.textContent = word === 'not found' ? 'No leases: the service knows no such session.' : 'Its leases ended with it.';
      return;
    }
    if (reply.status !== 200 || !reply.body || !reply.body.session) {
      sessionState('error', 'Could not read the session: ' + problemText(reply), 'error');
      return;
    }
    view.lost = null;
    view.live = { session: reply.body.session, at: performance.now() };
    const s = reply.body.session;
    sessionState('live', 'Live' + (s.holder ? ', held by ' + s.holder : '') + '.', 'live');
    renderSessionFacts(view);
    // This page of its leases; the next page's cursor kept for "Next".
    const leases = reply.body.leases || [];
    const next = reply.body.nextCursor;
    view.cursors.length = view.page + 1;
    if (next) view.cursors.push(next);
    const first = Number(view.cursors[view.page] || 0);
    // Rebuilt only when the page changes (a button rebuilt under the
    // pointer would swallow the click).
    const shown = JSON.stringify([first, leases]);
    if (shown !== view.shown) {
      view.shown = shown;
      tbody.replaceChildren();
      leases.forEach((l, n) => {
        const open = el('button', shortDigest(l.digest));
        open.type = 'button';
        open.title = l.digest;
        open.setAttribute('aria-label', 'Lease ' + l.digest + ' of ' + l.purpose);
        open.addEventListener('click', () => selectPurpose(l.purpose, l.digest));
        const tr = row([el('td', first + n + 1, 'num'), l.purpose, open]);
        tr.dataset.digest = l.digest;
        tr.dataset.purpose = l.purpose;
        tbody.appendChild(tr);
      });
    }
    $('session-leases').hidden = !leases.length;
    status.textContent = leases.length
      ? `${first + 1} to ${first + leases.length} of ${s.leases}, in the order they were attached` + (next ? '; more on the next page.' : '.')
      : s.leases
        ? 'No lease on this page.'
        : 'No lease on this session.';
    $('session-prev').hidden = view.page === 0;
    $('session-next').hidden = !next;
  }

  // The facts of the last live read; after a loss, marked as last seen.
  function renderSessionFacts(view) {
    const dl = $('session-facts');
    dl.replaceChildren();
    const live = view.live;
    if (!live) {
      if (view.lost) fact(dl, 'state', view.lost.word);
      return;
    }
    const s = live.session;
    if (view.lost) fact(dl, 'state', view.lost.word + '; below as last seen live');
    fact(dl, 'holder', s.holder || '—');
    fact(dl, 'leases', s.leases, 'session-count');
    fact(dl, 'TTL', dur(s.ttlMs));
    fact(dl, 'remaining', view.lost ? '—' : dur(s.remainingMs), 'session-remaining');
    fact(dl, 'expires', view.lost ? '—' : when(s.expiresAt, ahead));
    fact(dl, 'renewed', when(s.renewedAt, ago));
    fact(dl, 'created', when(s.createdAt, view.lost ? ago : (d) => 'alive ' + dur(-d)));
  }

  // The remaining time counts down between reads.
  function tickSession() {
    const view = state.session;
    if (!view || !view.live || view.lost) return;
    const out = $('session-remaining');
    if (out) setText(out, dur(view.live.session.remainingMs - (performance.now() - view.live.at)));
  }

  $('session-refresh').addEventListener('click', () => loadSession());
  $('session-next').addEventListener('click', () => {
    const view = state.session;
    if (!view || view.page + 1 >= view.cursors.length) return;
    view.page += 1;
    loadSession();
  });
  $('session-prev').addEventListener('click', () => {
    const view = state.session;
    if (!view || view.page === 0) return;
    view.page -= 1;
    loadSession();
  });

  $('session-lookup').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = $('session-input').value.trim();
    if (!SESSION_ID.test(id)) {
      say('A session id is s1. and 32 lowercase hex digits.');
      return;
    }
    $('session-input').value = ''; // the view's heading names it
    openSession(id);
  });

  $('detail').addEventListener('click', (event) => {
    const b = event.target.closest('button.session-link');
    if (b) openSession(b.dataset.session);
  });

  start();
})();
