"""The PyTorch twin of bppsa's SequenceClassifier (nn.RNN/GRU/LSTM, batch_first, then a
Linear head on the last step), with the same state_dict names: shared by the gradient
cross-check (tests/pytorch) and the benchmark driver (bench/)."""
import torch.nn as nn

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class Model(nn.Module):
    def __init__(self, cell, i, h, layers, c):
        super().__init__()
        self.rnn = CELLS[cell](i, h, layers, batch_first=True)
        self.head = nn.Linear(h, c)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])
