"""DEER (Lim et al., ICLR 2024) in JAX, as its paper and reference code describe it, beside bppsa's
Newton forward (bench/newton/run.sh): the peer a user would pick for a parallel forward today.

One trajectory per sample (vmapped over the batch, as the reference code runs it), started from the
initial state everywhere. Each iteration linearises the cell at the current guess, with dense
Jacobians J_t = ∂f/∂s (jax.jacfwd, vmapped over the steps), and solves the linear recurrence
s_t = J_t s_(t-1) + (f(ŝ_(t-1), x_t) − J_t ŝ_(t-1)) by jax.lax.associative_scan over the affine maps
(J, b), combined as (J_b J_a, J_b b_a + b_b). It stops when max |s^(i+1) − s^(i)| ≤ 1e-4 in
float32 (1e-7 in float64), the reference code's rule, or after --max-iter iterations. Jitted; the
cells are torch.nn's (bench/peers/jax_peers.py's cell_fn, one layer, no head).

Every result is checked against the sequential forward (jax.lax.scan over the same cell): a
trajectory that did not converge, or converged elsewhere, is reported as such. Memory: what XLA's
compiled program asks for (memory_analysis: arguments, outputs and temporaries); a shape whose
program needs more than --max-memory-gb is not run and is reported with that figure.

Writes one JSON line per shape to --out (and a Markdown row per shape to stdout)."""
import argparse
import json
import os
import sys
import time


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=["rnn", "gru", "lstm"], choices=["rnn", "gru", "lstm"])
    ap.add_argument("--steps", nargs="+", type=int, default=[100, 1000, 10000])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--input", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="XLA's intra-op threads (and the cores used)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--spectral-radius", type=float, default=0.0,
                    help="scale W_hh to this spectral norm (as bench_newton does); 0 = PyTorch's initialisation")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--max-memory-gb", type=float, default=8.0,
                    help="do not run a shape whose compiled program needs more (reported instead)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True, help="JSON lines, appended")
    a = ap.parse_args(argv)
    for t in a.steps:
        if t < 1:
            ap.error(f"--steps: {t} is not a sequence length (≥ 1)")
    for name in ("batch", "hidden", "input", "threads", "reps", "max_iter"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(a, name)}")
    return a


def main(argv=None):
    a = parse(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "peers"))
    import peers_common as common  # noqa: E402  (sets nothing until asked)
    common.pin_threads(a.threads)
    os.environ.update(common.xla_env(a.threads))
    if a.dtype == "float64":
        os.environ["JAX_ENABLE_X64"] = "1"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax_peers import cell_fn

    dtype = jnp.float64 if a.dtype == "float64" else jnp.float32
    tol = 1e-7 if a.dtype == "float64" else 1e-4

    def params(cell, rng):
        gates = {"rnn": 1, "gru": 3, "lstm": 4}[cell]
        H, k = a.hidden, 1 / np.sqrt(a.hidden)
        p = {"rnn.weight_ih_l0": rng.uniform(-k, k, (gates * H, a.input)),
             "rnn.weight_hh_l0": rng.uniform(-k, k, (gates * H, H)),
             "rnn.bias_ih_l0": rng.uniform(-k, k, gates * H),
             "rnn.bias_hh_l0": rng.uniform(-k, k, gates * H)}
        if a.spectral_radius > 0:
            w = p["rnn.weight_hh_l0"]
            p["rnn.weight_hh_l0"] = w * (a.spectral_radius / np.linalg.norm(w, 2))
        return {n: jnp.asarray(v, dtype) for n, v in p.items()}

    def programs(cell):
        S = 2 * a.hidden if cell == "lstm" else a.hidden
        step = cell_fn(cell.upper(), a.hidden)

        def proj(p, x):  # x (B, T, I) → (B, T, G·H)
            return x @ p["rnn.weight_ih_l0"].T + p["rnn.bias_ih_l0"]

        def sequential(p, x):
            def body(s, xt):
                s = step(p, s, xt)
                return s, s
            _, ss = jax.lax.scan(body, jnp.zeros((x.shape[0], S), dtype), jnp.swapaxes(proj(p, x), 0, 1))
            return jnp.swapaxes(ss, 0, 1)  # (B, T, S)

        def deer_one(p, xp):  # one sample: xp (T, G·H) → states (T, S), iterations, last change
            f = lambda s, xt: step(p, s[None], xt[None])[0]
            jac = jax.vmap(jax.jacfwd(f))
            value = jax.vmap(f)

            def combine(first, then):
                ja, ba = first
                jb, bb = then
                return jb @ ja, jnp.einsum("...ij,...j->...i", jb, ba) + bb

            def iterate(carry):
                s, _, it = carry
                prev = jnp.concatenate([jnp.zeros((1, S), dtype), s[:-1]])
                j = jac(prev, xp)  # (T, S, S)
                b = value(prev, xp) - jnp.einsum("tij,tj->ti", j, prev)
                _, nxt = jax.lax.associative_scan(combine, (j, b))  # s_0 = 0: the affine parts are the states
                return nxt, jnp.max(jnp.abs(nxt - s)), it + 1

            def unconverged(carry):
                _, change, it = carry
                return jnp.logical_and(change > tol, it < a.max_iter)

            init = (jnp.zeros((xp.shape[0], S), dtype), jnp.asarray(jnp.inf, dtype), jnp.asarray(0, jnp.int32))
            return jax.lax.while_loop(unconverged, iterate, init)

        def deer(p, x):
            return jax.vmap(deer_one, in_axes=(None, 0))(p, proj(p, x))

        return jax.jit(sequential), jax.jit(deer), S

    def median_ms(fn, *args):
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))

    def needed_bytes(compiled):
        m = compiled.memory_analysis()
        if m is None:
            return None
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)

    print(f"| cell | T | batch | H | threads | lax.scan ms | DEER ms | DEER / lax.scan | iterations | "
          f"max |DEER − lax.scan| | DEER memory GB | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(a.seed)
    with open(a.out, "a") as out:
        for cell in a.cells:
            seq_fn, deer_fn, S = programs(cell)
            for T in a.steps:
                p = params(cell, rng)
                x = jnp.asarray(rng.uniform(-1, 1, (a.batch, T, a.input)), dtype)
                rec = {"peer": "jax DEER", "cell": cell, "steps": T, "batch": a.batch, "hidden": a.hidden,
                       "threads": a.threads, "spectral_radius": a.spectral_radius, "dtype": a.dtype,
                       "tolerance": tol, "max_iter": a.max_iter, "jax": jax.__version__}
                need = needed_bytes(deer_fn.lower(p, x).compile())
                rec["deer_bytes"] = need
                rec["jacobian_bytes"] = a.batch * T * S * S * jnp.dtype(dtype).itemsize
                note = ""
                want = seq_fn(p, x)
                rec["scan_ms"] = median_ms(seq_fn, p, x)
                if need is not None and need > a.max_memory_gb * 2 ** 30:
                    rec["status"] = "out of memory"
                    note = f"not run: needs {need / 2 ** 30:.1f} GB (> --max-memory-gb {a.max_memory_gb:g})"
                else:
                    states, change, iters = deer_fn(p, x)
                    rec["iterations_max"] = int(jnp.max(iters))
                    rec["iterations_mean"] = float(jnp.mean(iters))
                    rec["converged"] = bool(jnp.all(change <= tol))
                    rec["max_abs_diff"] = float(jnp.max(jnp.abs(states - want)))
                    rec["deer_ms"] = median_ms(deer_fn, p, x)
                    rec["status"] = "ok" if rec["converged"] else "not converged"
                    if not rec["converged"]:
                        note = f"not converged in {a.max_iter} iterations"
                out.write(json.dumps(rec) + "\n")
                out.flush()
                gb = f"{need / 2 ** 30:.3f}" if need is not None else "?"
                if "deer_ms" in rec:
                    print(f"| {cell} | {T} | {a.batch} | {a.hidden} | {a.threads} | {rec['scan_ms']:.2f} | "
                          f"{rec['deer_ms']:.2f} | {rec['deer_ms'] / rec['scan_ms']:.1f} | {rec['iterations_max']} | "
                          f"{rec['max_abs_diff']:.2g} | {gb} | {note} |", flush=True)
                else:
                    print(f"| {cell} | {T} | {a.batch} | {a.hidden} | {a.threads} | {rec['scan_ms']:.2f} | – | – | – | "
                          f"– | {gb} | {note} |", flush=True)


if __name__ == "__main__":
    main()
