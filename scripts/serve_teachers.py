"""Start real LM teachers for the Composer (vLLM OpenAI servers on CPU): `verl_ext/composer/teacher_servers/`.

python scripts/serve_teachers.py --model released --model trained=outputs/teachers/grpo_s0_step16
"""

import sys

from verl_ext.composer.teacher_servers.cli import main

if __name__ == "__main__":
    sys.exit(main())
