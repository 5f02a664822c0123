"""A tiny randomly initialised vision-language model (a LLaVA config: CLIP vision tower, Llama
decoder, a word-level tokenizer) saved as a local folder, loaded the way a real VLM is."""
import torch

WORDS = ("doctor patient the eye is red it hurts since monday an x-ray shows no fracture summarise in one sentence "
         "describe this image user assistant : . , source").split()
PATCHES = 4  # (16 px / 8 px)^2 image tokens


def build_tiny_vlm(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration,
                              LlavaProcessor, PreTrainedTokenizerFast)

    specials = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
    vocab = {w: i for i, w in enumerate([*specials, *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  extra_special_tokens={"image_token": "<image>"})
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = ("{% for m in messages %}{{ m['role'] }} : {% for c in m['content'] %}{% if c['type'] == 'image' %}<image> "
                "{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}assistant :")
    processor = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}),
                               tokenizer=tok, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
                               num_additional_image_tokens=1, chat_template=template)
    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       image_size=16, patch_size=8, projection_dim=16),
        text_config=LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, bos_token_id=2, eos_token_id=3, pad_token_id=0),
        image_token_index=vocab["<image>"], vision_feature_select_strategy="default", vision_feature_layer=-1,
    )
    model = LlavaForConditionalGeneration(config)
    model.generation_config.eos_token_id = 3
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
