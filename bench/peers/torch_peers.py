"""PyTorch peers, written as PyTorch users write them:
- torch.nn eager: nn.RNN/GRU/LSTM + Linear on h_T, cross-entropy, loss.backward(), Adam;
- torch.compile: the same module through torch.compile (mode default), compile time reported apart;
- torch scan: the cell written by hand and run through PyTorch's prototype
  torch._higher_order_ops.scan, BPTT by autograd through it; compiled with torch.compile when that
  works, else eager (the compile error is recorded);
- bppsa.nn: the same module from bppsa.nn with backward= bp | blelloch | hybrid | auto.
Every side: the weights of the seeded torch.nn model (the runner's data file), the same data,
Adam(lr 1e-4), subnormal floats flushed to zero (torch.set_flush_denormal(True) before torch starts
its threads, which inherit it): bppsa's engine flushes them, and torch.nn slows down many times
over on them (docs/pytorch.md), so torch is timed at its best."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, family, cfg, **kw):
        super().__init__()
        self.rnn = getattr(family, cfg["cell"])(cfg["features"], cfg["hidden"], batch_first=True, **kw)
        self.head = torch.nn.Linear(cfg["hidden"], cfg["classes"])

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def reference_model(cfg, seed):
    """The seeded torch.nn model whose weights every peer uses."""
    torch.manual_seed(seed)
    return Model(torch.nn, cfg)


class ScanModel(torch.nn.Module):
    """The same parameters (names and shapes of torch.nn's), the recurrence through
    torch._higher_order_ops.scan."""

    def __init__(self, cfg):
        super().__init__()
        self.cell = cfg["cell"]
        self.hidden = cfg["hidden"]
        self.rnn = getattr(torch.nn, cfg["cell"])(cfg["features"], cfg["hidden"], batch_first=True)
        self.head = torch.nn.Linear(cfg["hidden"], cfg["classes"])

    def forward(self, x):
        from torch._higher_order_ops.scan import scan
        r, H = self.rnn, self.hidden
        xp = (x @ r.weight_ih_l0.T + r.bias_ih_l0).transpose(0, 1)  # (T, B, G·H)
        w_hh, b_hh = r.weight_hh_l0, r.bias_hh_l0

        if self.cell == "RNN":
            def step(h, xt):
                h = torch.tanh(xt + h @ w_hh.T + b_hh)
                return h.clone(), h
            init = x.new_zeros(x.shape[0], H)
        elif self.cell == "GRU":
            def step(h, xt):
                gh = h @ w_hh.T + b_hh
                xr, xz, xn = xt.chunk(3, -1)
                hr, hz, hn = gh.chunk(3, -1)
                rr, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                n = torch.tanh(xn + rr * hn)
                h = (1 - z) * n + z * h
                return h.clone(), h
            init = x.new_zeros(x.shape[0], H)
        else:
            def step(s, xt):
                h, c = s[:, :H], s[:, H:]
                i, f, g, o = (xt + h @ w_hh.T + b_hh).chunk(4, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                s = torch.cat([h, c], -1)
                return s.clone(), s
            init = x.new_zeros(x.shape[0], 2 * H)
        last, _ = scan(step, init, xp)
        return self.head(last[:, :H])


class TorchPeer:
    """A torch.nn.Module model trained as a PyTorch loop trains it."""

    def __init__(self, model, x, y):
        self.model, self.x, self.y = model, x, y
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.loss = None
        self.info = {}

    def first_loss(self):
        with torch.no_grad():
            return F.cross_entropy(self.model(self.x), self.y).item()

    def forward(self):  # untimed, ahead of each backward()
        self.model.zero_grad(set_to_none=True)
        self.loss = F.cross_entropy(self.model(self.x), self.y)

    def backward(self):
        self.loss.backward()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()

    def grads(self):
        self.forward()
        self.backward()
        return {k: p.grad.detach().numpy().copy() for k, p in self.model.named_parameters()}


def build(peer, cfg, data, threads):
    flushed = torch.set_flush_denormal(True)  # False: a CPU without the mode (recorded)
    torch.set_num_threads(threads)
    x = torch.from_numpy(data["x"])
    y = torch.from_numpy(data["y"]).long()
    state = {k[len("w."):]: torch.from_numpy(data[k]) for k in data.files if k.startswith("w.")}
    info = {"versions": {"torch": torch.__version__}, "flush_denormal": flushed}
    if peer in ("torch.nn", "torch.compile"):
        model = Model(torch.nn, cfg)
    elif peer.startswith("torch scan"):
        model = ScanModel(cfg)
    else:  # bppsa.nn <method>
        import bppsa
        info["versions"]["bppsa"] = bppsa.__version__
        model = Model(bppsa.nn, cfg, backward=peer.split()[-1], threads=threads)
    model.load_state_dict(state)
    if peer in ("torch.compile", "torch scan"):
        model = torch.compile(model)
        info["compiled"] = "torch.compile(mode='default')"
    p = TorchPeer(model, x, y)
    p.info = info
    return p
