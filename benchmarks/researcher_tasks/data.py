"""The shared inputs of the three tasks (not counted in any version's lines)."""
import torch

N, T = 8, 24
SEQ = torch.randint(1000, 20000, (N, T), generator=torch.Generator().manual_seed(0))
TOKENS = torch.cat([SEQ, SEQ], 1)
FORMAL = ["Dear colleagues, I am writing to inform you that the meeting has been rescheduled.",
          "We kindly request that you submit the completed documents at your earliest convenience.",
          "Please accept my sincere apologies for any inconvenience this may have caused.",
          "I would be grateful if you could confirm your attendance by Friday."]
CASUAL = ["hey guys, just a heads up, the meeting got moved lol",
          "can u send me those docs whenever, no rush",
          "oops my bad, sorry about that!",
          "lemme know if ur coming friday ok?"]
QUESTION = "Write a short note telling a friend you will be late."
LAYER, SCALE, NEW_TOKENS, TOP = 15, 1.5, 24, 6
