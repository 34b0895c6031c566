import type {CalculateMetadataFunction} from 'remotion';
import type {z} from 'zod';

// Remotion 4.0.529 only uses a <Composition schema> for the Studio editor; it
// does NOT validate inputProps at selectComposition()/renderMedia() time.
// Compositions call this from calculateMetadata (which runs inside
// selectComposition) so bad props fail before any frame is rendered, with a
// message naming every bad field. The render worker classifies errors whose
// message starts with "Invalid props for " as kind "invalid-props".
export const validateProps = <T extends z.ZodType>(
	compositionId: string,
	schema: T,
	props: unknown,
): z.infer<T> => {
	const result = schema.safeParse(props);
	if (result.success) {
		return result.data;
	}
	const issues = result.error.issues
		.map((issue) => {
			const where = issue.path.length === 0 ? '(props)' : issue.path.join('.');
			return `${where}: ${issue.message}`;
		})
		.join('; ');
	throw new Error(`Invalid props for ${compositionId}: ${issues}`);
};

// calculateMetadata for compositions whose length comes from props.seconds (30 fps):
// validates the props (see above), then sets the duration from them.
export const metadataFromSeconds = <P extends {seconds: number}>(
	compositionId: string,
	schema: z.ZodType<P>,
): CalculateMetadataFunction<P> => {
	return ({props}) => {
		const valid = validateProps(compositionId, schema, props) as P;
		return {
			durationInFrames: Math.max(1, Math.round(valid.seconds * 30)),
			props: valid,
		};
	};
};
