"""JAX peers, jitted, with torch.nn's parameters (same names, shapes and gate order):
- jax scan:          BPTT, jax.grad through jax.lax.scan;
- jax assoc-scan BPPSA: forward by lax.scan, the transposed Jacobians J_t^T of the cell (closed
  form W_hh^T diag(1 − h_t²) for the tanh RNN; jax.vmap(jax.jacrev(cell)) over steps and batch for
  GRU/LSTM), a jax.lax.associative_scan over (M, v) pairs (affine maps u ↦ M u + v, combined as
  (M_b M_a, M_b v_a + v_b): the ◇ operator, as DEER's and ELK's code builds it), then the
  parameter gradients from the state gradients by one vjp of the per-step cell.
Adam as torch.optim.Adam's defaults (lr 1e-4, β 0.9/0.999, ε 1e-8), written out (no optax here)."""
from importlib import metadata

import jax
import jax.numpy as jnp
import numpy as np


def cell_fn(cell, H):
    """cell(p, s, xt) → s': one step on the state s (B, S) given xt = x_t W_ih^T + b_ih."""
    if cell == "RNN":
        def f(p, s, xt):
            return jnp.tanh(xt + s @ p["rnn.weight_hh_l0"].T + p["rnn.bias_hh_l0"])
    elif cell == "GRU":
        def f(p, s, xt):
            gh = s @ p["rnn.weight_hh_l0"].T + p["rnn.bias_hh_l0"]
            xr, xz, xn = jnp.split(xt, 3, -1)
            hr, hz, hn = jnp.split(gh, 3, -1)
            r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * hn)
            return (1 - z) * n + z * s
    else:
        def f(p, s, xt):
            h, c = s[..., :H], s[..., H:]
            i, fg, g, o = jnp.split(xt + h @ p["rnn.weight_hh_l0"].T + p["rnn.bias_hh_l0"], 4, -1)
            c = jax.nn.sigmoid(fg) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            return jnp.concatenate([jax.nn.sigmoid(o) * jnp.tanh(c), c], -1)
    return f


class Net:
    def __init__(self, cfg):
        self.cfg, self.H = cfg, cfg["hidden"]
        self.S = 2 * self.H if cfg["cell"] == "LSTM" else self.H
        self.cell = cell_fn(cfg["cell"], self.H)

    def proj(self, p, x):  # x (B, T, F) → (T, B, G·H)
        return jnp.swapaxes(x @ p["rnn.weight_ih_l0"].T + p["rnn.bias_ih_l0"], 0, 1)

    def states(self, p, x):
        def step(s, xt):
            s = self.cell(p, s, xt)
            return s, s
        s0 = jnp.zeros((x.shape[0], self.S), x.dtype)
        _, ss = jax.lax.scan(step, s0, self.proj(p, x))
        return ss  # (T, B, S): s_1 … s_T

    def head_loss(self, p, sT, y):
        logits = sT[:, :self.H] @ p["head.weight"].T + p["head.bias"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    def loss(self, p, x, y):  # the sequential model: what jax.grad differentiates
        def step(s, xt):
            return self.cell(p, s, xt), None
        sT, _ = jax.lax.scan(step, jnp.zeros((x.shape[0], self.S), x.dtype), self.proj(p, x))
        return self.head_loss(p, sT, y)

    # --- BPPSA --------------------------------------------------------------------------------
    def jacobians_T(self, p, x, ss):
        """J_t^T = (∂s_t/∂s_{t-1})^T for t = 2…T: (T-1, B, S, S)."""
        if self.cfg["cell"] == "RNN":
            d = 1 - ss[1:] ** 2  # (T-1, B, H)
            return p["rnn.weight_hh_l0"].T[None, None] * d[:, :, None, :]  # W^T diag(1 − h_t²)
        xp = self.proj(p, x)[1:]
        one = lambda s, xt: self.cell(p, s[None], xt[None])[0]
        jac = jax.vmap(jax.vmap(jax.jacrev(one)))(ss[:-1], xp)  # ∂s_t/∂s_{t-1}, (T-1, B, S, S)
        return jnp.swapaxes(jac, -1, -2)

    def fwd(self, p, x, y):
        """Forward: the states, the loss, dL/ds_T and the head's gradients."""
        ss = self.states(p, x)
        loss, (gp, gT) = jax.value_and_grad(self.head_loss, argnums=(0, 1))(p, ss[-1], y)
        return loss, ss, gT, {k: gp[k] for k in ("head.weight", "head.bias")}

    def bwd(self, p, x, ss, gT, perturb=0.0):
        """Backward by the scan: every dL/ds_t, then the recurrent layer's parameter gradients."""
        M = self.jacobians_T(p, x, ss) * (1 + perturb)  # perturb: only for testing the check
        T, B, S = ss.shape
        Ms = jnp.concatenate([M, jnp.zeros((1, B, S, S), M.dtype)])  # element t: J_{t+1}^T; last: g_T
        vs = jnp.concatenate([jnp.zeros((T - 1, B, S), M.dtype), gT[None]])

        def combine(a, b):  # a: the later steps' prefix, b: the next element (reverse scan)
            return b[0] @ a[0], (b[0] @ a[1][..., None])[..., 0] + b[1]

        _, g = jax.lax.associative_scan(combine, (Ms, vs), reverse=True)  # g[t] = dL/ds_{t+1}
        prev = jnp.concatenate([jnp.zeros((1, B, S), ss.dtype), ss[:-1]])
        rnn = {k: v for k, v in p.items() if k.startswith("rnn.")}

        def all_steps(q):
            return jax.vmap(self.cell, in_axes=(None, 0, 0))(q, prev, self.proj(q, x))

        (grads,) = jax.vjp(all_steps, rnn)[1](g)
        return grads

    def bppsa_grad(self, p, x, y, perturb=0.0):
        loss, ss, gT, head = self.fwd(p, x, y)
        return loss, {**self.bwd(p, x, ss, gT, perturb), **head}


def adam(p, g, m, v, t, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8):
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
    t = t + 1
    p = jax.tree.map(lambda p, m, v: p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps), p, m, v)
    return p, m, v, t


class JaxPeer:
    def __init__(self, peer, cfg, data, perturb=0.0):
        self.net = net = Net(cfg)
        self.p = {k[len("w."):]: jnp.asarray(data[k]) for k in data.files if k.startswith("w.")}
        self.x, self.y = jnp.asarray(data["x"]), jnp.asarray(data["y"].astype(np.int32))
        self.m = jax.tree.map(jnp.zeros_like, self.p)
        self.v = jax.tree.map(jnp.zeros_like, self.p)
        self.t = jnp.zeros((), jnp.int32)
        self.info = {"versions": {"jax": jax.__version__, "jaxlib": metadata.version("jaxlib")},
                     "compiled": "jax.jit"}
        self._loss = jax.jit(net.loss)
        if peer == "jax scan":
            grad = jax.value_and_grad(net.loss)
            fwd = jax.jit(lambda p, x, y: jax.vjp(lambda q: net.loss(q, x, y), p))
            bwd = jax.jit(lambda f, ct: f(ct)[0])
            self._fwd = lambda: fwd(self.p, self.x, self.y)
            self._bwd = lambda r: bwd(r[1], jnp.ones((), jnp.float32))
        else:
            grad = lambda p, x, y: net.bppsa_grad(p, x, y, perturb)
            fwd = jax.jit(net.fwd)
            bwd = jax.jit(lambda p, x, ss, gT: net.bwd(p, x, ss, gT, perturb))
            self._fwd = lambda: fwd(self.p, self.x, self.y)
            self._bwd = lambda r: bwd(self.p, self.x, r[1], r[2])
        self._grad = jax.jit(grad)

        def train_step(p, m, v, t, x, y):
            loss, g = grad(p, x, y)
            return (loss, *adam(p, g, m, v, t))

        self._step = jax.jit(train_step)
        self._r = None

    def first_loss(self):
        return float(self._loss(self.p, self.x, self.y))

    def forward(self):  # untimed, ahead of each backward()
        self._r = jax.block_until_ready(self._fwd())

    def backward(self):
        jax.block_until_ready(self._bwd(self._r))

    def step(self):
        out = self._step(self.p, self.m, self.v, self.t, self.x, self.y)
        _, self.p, self.m, self.v, self.t = jax.block_until_ready(out)

    def grads(self):
        return {k: np.asarray(v) for k, v in self._grad(self.p, self.x, self.y)[1].items()}


def check_bppsa_grads(cfg, data, perturb=0.0, tol=1e-4):
    """The JAX BPPSA's gradients against jax.grad of the sequential model: relative error
    ‖g − g_ref‖ / ‖g_ref‖ per parameter. Returns (ok, {name: rel err})."""
    net = Net(cfg)
    p = {k[len("w."):]: jnp.asarray(data[k]) for k in data.files if k.startswith("w.")}
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"].astype(np.int32))
    ref = jax.jit(jax.grad(net.loss))(p, x, y)
    _, got = jax.jit(lambda p, x, y: net.bppsa_grad(p, x, y, perturb))(p, x, y)
    err = {k: float(jnp.linalg.norm(got[k] - ref[k]) / max(float(jnp.linalg.norm(ref[k])), 1e-30)) for k in ref}
    return all(e <= tol for e in err.values()), err


def build(peer, cfg, data, threads, perturb=0.0):
    return JaxPeer(peer, cfg, data, perturb)
