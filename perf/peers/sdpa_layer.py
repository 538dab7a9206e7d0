"""The attention layer the PyTorch 2.x and OpenVINO peers run: one nn.Linear for Q|K|V (bias),
torch.nn.functional.scaled_dot_product_attention over (batch, heads, seq, d_k), nn.Linear out.
Shared by torch_mha.py (mode sdpa) and openvino_mha.py (which converts it)."""
import torch


class Layer(torch.nn.Module):
    def __init__(self, d, h, causal):
        super().__init__()
        self.h, self.dk, self.causal = h, d // h, causal
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x, keep=None):
        """x (B, S, d); keep: None, or (B, 1, 1, S) bool, True where a key may be attended to."""
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                                             is_causal=bool(self.causal) and keep is None)
        return self.out(z.transpose(1, 2).reshape(b, s, d))


def padding_mask(b, s, lengths):
    """(B, 1, 1, S) bool: key j of sequence i is attended to when j < its length; None without lengths."""
    if not lengths:
        return None
    n = torch.tensor([lengths[i % len(lengths)] for i in range(b)])
    return (torch.arange(s)[None, :] < n[:, None])[:, None, None, :]
