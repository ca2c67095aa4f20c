"""A redis-server under callgrind on a free loopback port, for the bench
scripts that count Redis' instructions (redis-cycle-cost.py,
redis-call-floor.py): a RESP client, the callgrind controls and the
dumps' totals. The server is killed and its directory removed when the
script exits, on Ctrl-C or SIGTERM too (its dumps kept with
LOAD_KEEP_LOGS=1). Needs valgrind and redis-server."""
import atexit, os, shutil, signal, socket, subprocess, sys, tempfile, time

for tool in ('valgrind', 'callgrind_control', 'redis-server'):
    if not shutil.which(tool):
        sys.exit(f'missing {tool}: apt-get install valgrind redis-server')


def resp(*a):
    out = b'*%d\r\n' % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b'$%d\r\n%s\r\n' % (len(x), x)
    return out


class Client:
    def __init__(s, port):
        s.s = socket.create_connection(('127.0.0.1', port)); s.f = s.s.makefile('rb')

    def cmd(s, *a):
        s.s.sendall(resp(*a)); return s.read()

    def read(s):
        l = s.f.readline()
        t, r = l[:1], l[1:-2]
        if t == b'+': return r.decode()
        if t == b'-': raise RuntimeError(r.decode())
        if t == b':': return int(r)
        if t == b'$':
            n = int(r)
            if n < 0: return None
            d = s.f.read(n + 2); return d[:-2].decode('latin1')
        if t == b'*':
            n = int(r)
            return None if n < 0 else [s.read() for _ in range(n)]
        raise RuntimeError(l)


class Server:
    """The server, instrumentation off until `ctl('-i', 'on')`; `c` is a
    connected client."""

    def __init__(s, prefix):
        sock = socket.socket(); sock.bind(('127.0.0.1', 0)); s.port = sock.getsockname()[1]; sock.close()
        s.dir = tempfile.mkdtemp(prefix=prefix)
        s.vg = subprocess.Popen(['valgrind', '--tool=callgrind', '--instr-atstart=no', f'--callgrind-out-file={s.dir}/cg.out',
            'redis-server', '--port', str(s.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', s.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(s.stop)
        # A SIGTERM ends the script through its exit handlers too.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        s.c = None
        for _ in range(600):
            try:
                s.c = Client(s.port); s.c.cmd('PING'); break
            except OSError:
                s.c = None; time.sleep(0.1)
        if s.c is None:
            sys.exit('redis-server under callgrind did not start within 60 s')
        s.dumps = 0

    def ctl(s, *a):
        subprocess.run(['callgrind_control', *a, str(s.vg.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    def dump_total(s):
        """Dumps the counts since the last zeroing; their total."""
        s.ctl('-d'); s.dumps += 1
        for l in open(f'{s.dir}/cg.out.{s.dumps}').read().splitlines():
            if l.startswith('totals:') or l.startswith('summary:'): return int(l.split()[1])
        raise RuntimeError(f'no total in {s.dir}/cg.out.{s.dumps}')

    def stop(s):
        if s.vg.poll() is None:
            # SIGTERM first: valgrind then removes its vgdb FIFOs in /tmp.
            s.vg.terminate()
            try:
                s.vg.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.vg.kill(); s.vg.wait()
        if not os.environ.get('LOAD_KEEP_LOGS'):
            shutil.rmtree(s.dir, ignore_errors=True)
