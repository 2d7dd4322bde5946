# Summarizes the stamps of bench/experiments/gemv_trace.patch (LITHE_GEMV_TRACE): the last decode
# step's GEMV launches in time order. Per launch kind, medians over the step's launches of: when the
# first block's wait passed (us after the previous GEMV launch's last block exit, E), and per-block
# medians of staging (wait -> x staged), the first batch (x staged -> warp 0's first batch
# multiplied), the rest of the main loop, the tail (loop done -> exit; k-split sums, epilogue), the
# SM clock over the main loop (GHz), and when the launch's last block exited (end, after E).
import statistics as st
import sys

launches, cur = [], None
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == 'L':
        cur = dict(grid=int(p[2]), ks=int(p[3]), nm=int(p[7]), n_in=int(p[9]), b=[])
        launches.append(cur)
    else:
        cur['b'].append([int(v) for v in p])
# block line: 0 SM, 1 start, 2 wait, 3 staged, 4 loop done, 5 exit, 6 first batch, 7 (unused),
# 8..11 SM clock at wait, staged, first batch, loop done
launches = [l for l in launches if l['b'] and min(b[1] for b in l['b']) > 0]
for l in launches:
    l['t0'] = min(b[1] for b in l['b'])
    l['t4'] = max(b[5] for b in l['b'])
launches.sort(key=lambda l: l['t0'])
step = [launches[-1]]  # the last step: walk back while launches follow within 200 us
for l in reversed(launches[:-1]):
    if step[0]['t0'] - l['t4'] > 200_000:
        break
    step.insert(0, l)
print(f"launches in the last step: {len(step)}; span {(step[-1]['t4'] - step[0]['t0']) / 1000:.1f} us")
name = {(3, 4096): 'qkv', (1, 4096): 'o', (2, 4096): 'gate/up', (1, 11008): 'down'}
rows, prev, total = {}, None, 0.0
for l in step:
    bs, E = l['b'], (prev['t4'] if prev else l['t0'])
    med = lambda f: st.median(f(b) for b in bs) / 1e3
    r = dict(grid=l['grid'], ks=l['ks'], wait=(min(b[2] for b in bs) - E) / 1e3,
             staging=med(lambda b: b[3] - b[2]), first=med(lambda b: b[6] - b[3]), loop=med(lambda b: b[4] - b[6]),
             tail=med(lambda b: b[5] - b[4]), ghz=st.median((b[11] - b[9]) / max(1, b[4] - b[3]) for b in bs),
             end=(l['t4'] - E) / 1e3)
    rows.setdefault(name.get((l['nm'], l['n_in']), f"{l['nm']}x{l['n_in']}"), []).append(r)
    total += r['end']
    prev = l
cols = ['grid', 'ks', 'wait', 'staging', 'first', 'loop', 'tail', 'ghz', 'end']
print('launch   n  ' + ' '.join(f'{c:>8}' for c in cols))
for k, rs in rows.items():
    print(f'{k:8} {len(rs):2} ' + ' '.join(f'{st.median(r[c] for r in rs):8.2f}' for c in cols))
print("sum of 'end' over the step (us):", round(total, 1))
